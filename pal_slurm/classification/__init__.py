"""Classification: from per-GPU benchmark runs to bins, slowdown factors and graded actions
(docs/classification.md). `classify` handles one (model, benchmark) group (its vocabulary in
`model`, its bins in `partition`, its statistics in `stats`), `classify_fleet` a whole fleet and
its job classes, `actions` one graded action per outlier GPU, all pure;
`service` is the classify use case that reads the runs and stores the result.
"""
