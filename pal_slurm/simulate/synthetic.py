"""Synthetic Philly-like traces: Poisson arrivals, job sizes, models and heavy-tailed
durations fitted to the six shared Sia-Philly workloads (960 jobs; PAL artifact data,
hal-uw/blox-pal, MIT licensed).

What the Sia-Philly traces show, and what the defaults reproduce:

- **Model and size go together.** vgg19 jobs always use 1 GPU; PointNet, DCGAN, BERT and
  GPT2 use 6, 8, 12 or 16; resnet50 uses 4 (mostly) or 24, 32, 48. The default draws the
  (model, GPU count) pair from the traces' joint counts (`SIA_PHILLY_MODEL_GPUS`), which
  gives the traces' GPU-count mix: 1 GPU 42%, 4: 6%, 6: 15%, 8: 13%, 12: 12%, 16: 10%,
  24-48: 2%.
- **Durations** (iterations) are heavy-tailed and depend on the model: median 904-966
  iterations for PointNet/vgg19 (60 to ~3,500), ~5,500-6,000 for BERT/DCGAN/GPT2, 76,000
  for resnet50 with a tail to 2.9 million. Each model's duration is drawn by inverse CDF
  from its empirical quantiles (`SIA_PHILLY_DURATION_QUANTILES`), interpolated linearly in
  log space, and rounded to whole iterations.
- **Arrivals** are a Poisson process: exponential inter-arrival times with mean
  `mean_interarrival_s` (the traces average ~112 s over 5 hours; the default 30 s loads a
  cluster harder). The first job arrives after one inter-arrival time.

`gpu_mix` and `model_mix` override the marginals: the pair is then drawn with weight
``model_mix[m] * P(g | m)``, where ``P(g | m)`` is `gpu_mix` (independent of the model) if
given, else the traces' per-model sizes. `max_gpus` keeps only pairs with ``g <=
max_gpus`` and renormalises (so it conditions on fitting the cluster instead of clipping).

Deterministic per seed (numpy ``default_rng``); vectorised, so 100,000 jobs take well under
a second.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pal_slurm.errors import InputError
from pal_slurm.simulate.traces import MODEL_CLASS, MODEL_ITER_TIME_S, Trace, TraceJob

__all__ = [
    "SIA_PHILLY_DURATION_QUANTILES",
    "SIA_PHILLY_MODEL_GPUS",
    "generate",
]

#: (model, GPUs) -> number of jobs in the six Sia-Philly workloads.
SIA_PHILLY_MODEL_GPUS: Mapping[tuple[str, int], int] = {
    ("vgg19", 1): 401,
    ("resnet50", 4): 60, ("resnet50", 24): 5, ("resnet50", 32): 9, ("resnet50", 48): 8,
    ("PointNet", 6): 106, ("PointNet", 8): 89, ("PointNet", 12): 93, ("PointNet", 16): 83,
    ("DCGAN", 6): 22, ("DCGAN", 8): 24, ("DCGAN", 12): 15,
    ("BERT", 6): 8, ("BERT", 8): 6, ("BERT", 12): 5, ("BERT", 16): 6,
    ("GPT2", 6): 6, ("GPT2", 8): 3, ("GPT2", 12): 5, ("GPT2", 16): 6,
}

#: Cumulative probabilities of the duration quantiles below.
QUANTILE_PROBS = (0.0, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 1.0)

#: model -> duration (iterations) at QUANTILE_PROBS, from the six Sia-Philly workloads
#: (numpy linear percentiles, rounded).
SIA_PHILLY_DURATION_QUANTILES: Mapping[str, tuple[float, ...]] = {
    "BERT": (768, 2753, 3734, 5621, 9610, 15113, 18431, 23580, 25028),
    "DCGAN": (493, 3774, 4367, 5939, 10868, 21917, 27537, 29380, 29563),
    "GPT2": (615, 3999, 4296, 5505, 13014, 15699, 18540, 27034, 29157),
    "PointNet": (60, 70, 190, 904, 1918, 2680, 2801, 2903, 3533),
    "resnet50": (1324, 16960, 40792, 76114, 140694, 406360, 584925, 1685739, 2912468),
    "vgg19": (60, 69, 186, 966, 2068, 2695, 2803, 3118, 3417),
}


def _pair_weights(model_mix: Mapping[str, float] | None, gpu_mix: Mapping[int, float] | None,
                  max_gpus: int | None) -> tuple[list[tuple[str, int]], np.ndarray]:
    """The (model, GPUs) pairs to draw from and their probabilities."""
    joint = SIA_PHILLY_MODEL_GPUS
    model_total: dict[str, float] = {}
    for (m, _), c in joint.items():
        model_total[m] = model_total.get(m, 0.0) + c
    pm = dict(model_mix) if model_mix is not None else model_total
    for m, w in pm.items():
        if m not in MODEL_CLASS:
            raise InputError(f"unknown model {m!r} in the model mix (known: {', '.join(sorted(MODEL_CLASS))})")
        if not w >= 0:
            raise InputError(f"model mix weight for {m!r} must be >= 0, got {w}")
    if gpu_mix is not None:
        for g, w in gpu_mix.items():
            if int(g) != g or g < 1 or not w >= 0:
                raise InputError(f"GPU mix entries must be GPUs >= 1 with weights >= 0, got {g}: {w}")
        gsum = float(sum(gpu_mix.values()))
        pairs = [(m, int(g)) for m in pm for g in gpu_mix]
        weights = [pm[m] * gpu_mix[g] / gsum if gsum > 0 else 0.0 for m in pm for g in gpu_mix]
    else:
        pairs = [(m, g) for (m, g) in joint if m in pm]
        weights = [pm[m] * joint[(m, g)] / model_total[m] for (m, g) in pairs]
    keep = [i for i, (_, g) in enumerate(pairs) if max_gpus is None or g <= max_gpus]
    w = np.array([weights[i] for i in keep], dtype=float)
    if not keep or w.sum() <= 0:
        raise InputError(f"no job size of the mix fits {max_gpus} GPUs" if max_gpus is not None
                         else "the model/GPU mix has no positive weight")
    return [pairs[i] for i in keep], w / w.sum()


def generate(n_jobs: int, *, seed: int, mean_interarrival_s: float = 30.0, max_gpus: int | None = None,
             gpu_mix: Mapping[int, float] | None = None, model_mix: Mapping[str, float] | None = None,
             name: str | None = None) -> Trace:
    """`n_jobs` Philly-like jobs (work in iterations), ids "0".."n-1" in arrival order."""
    if n_jobs < 0:
        raise InputError(f"number of jobs must be >= 0, got {n_jobs}")
    if not mean_interarrival_s > 0:
        raise InputError(f"mean inter-arrival time must be positive, got {mean_interarrival_s}")
    if max_gpus is not None and max_gpus < 1:
        raise InputError(f"max_gpus must be at least 1, got {max_gpus}")
    pairs, p = _pair_weights(model_mix, gpu_mix, max_gpus)
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(mean_interarrival_s, n_jobs))
    which = rng.choice(len(pairs), size=n_jobs, p=p)
    u = rng.random(n_jobs)
    models = [m for m, _ in pairs]
    work = np.empty(n_jobs)
    log_probs = np.asarray(QUANTILE_PROBS)
    for model in set(models):
        idx = [i for i, m in enumerate(models) if m == model]
        mask = np.isin(which, idx)
        log_q = np.log(np.asarray(SIA_PHILLY_DURATION_QUANTILES[model], dtype=float))
        work[mask] = np.exp(np.interp(u[mask], log_probs, log_q))
    work = np.maximum(np.rint(work), 1.0)
    source = f"synthetic(seed={seed})"
    jobs = tuple(
        TraceJob(job_id=str(i), num_gpus=pairs[k][1], submit_time=t, work=w, work_unit="iterations",
                 model=pairs[k][0], job_class=MODEL_CLASS[pairs[k][0]], iter_time_s=MODEL_ITER_TIME_S[pairs[k][0]],
                 line=0, source=source)
        for i, (k, t, w) in enumerate(zip(which.tolist(), submit.tolist(), work.tolist()))
    )
    return Trace(name=name or f"synthetic-{n_jobs}-seed{seed}", jobs=jobs)
