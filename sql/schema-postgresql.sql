BEGIN;

CREATE TABLE alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> 0001

CREATE TABLE benchmarks (
    id SERIAL NOT NULL, 
    name VARCHAR(64) NOT NULL, 
    unit VARCHAR(32) NOT NULL, 
    lower_is_better BOOLEAN NOT NULL, 
    description TEXT NOT NULL, 
    CONSTRAINT pk_benchmarks PRIMARY KEY (id), 
    CONSTRAINT uq_benchmarks_name UNIQUE (name)
);

CREATE TABLE classification_runs (
    id SERIAL NOT NULL, 
    version INTEGER NOT NULL, 
    created_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    params JSON NOT NULL, 
    previous_version INTEGER, 
    note TEXT NOT NULL, 
    CONSTRAINT pk_classification_runs PRIMARY KEY (id), 
    CONSTRAINT uq_classification_runs_version UNIQUE (version)
);

CREATE TABLE nodes (
    id SERIAL NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    first_seen TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    last_seen TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_nodes PRIMARY KEY (id), 
    CONSTRAINT uq_nodes_name UNIQUE (name)
);

CREATE TABLE placements (
    id BIGSERIAL NOT NULL, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    policy VARCHAR(64) NOT NULL, 
    job_class VARCHAR(16), 
    classification_version INTEGER, 
    gpus JSON NOT NULL, 
    alternatives JSON, 
    reason TEXT NOT NULL, 
    outcome VARCHAR(32) NOT NULL, 
    decided_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    applied_at TIMESTAMP WITHOUT TIME ZONE, 
    CONSTRAINT pk_placements PRIMARY KEY (id)
);

CREATE INDEX ix_placements_slurm_job_id ON placements (slurm_job_id);

CREATE TABLE classification_bins (
    id SERIAL NOT NULL, 
    run_id INTEGER NOT NULL, 
    model VARCHAR(128) NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    bin INTEGER NOT NULL, 
    centroid DOUBLE PRECISION NOT NULL, 
    slowdown DOUBLE PRECISION NOT NULL, 
    gpus INTEGER NOT NULL, 
    outlier BOOLEAN NOT NULL, 
    low DOUBLE PRECISION NOT NULL, 
    high DOUBLE PRECISION NOT NULL, 
    CONSTRAINT pk_classification_bins PRIMARY KEY (id), 
    CONSTRAINT fk_classification_bins_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_classification_bins_run_id_classification_runs FOREIGN KEY(run_id) REFERENCES classification_runs (id) ON DELETE CASCADE, 
    CONSTRAINT uq_classification_bins_run_id_model_benchmark_id_bin UNIQUE (run_id, model, benchmark_id, bin)
);

CREATE TABLE gpus (
    id SERIAL NOT NULL, 
    uuid VARCHAR(128) NOT NULL, 
    node_id INTEGER, 
    nvml_index INTEGER, 
    minor_number INTEGER, 
    pci_bus_id VARCHAR(32), 
    model VARCHAR(128) NOT NULL, 
    serial VARCHAR(64), 
    memory_mib INTEGER, 
    first_seen TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    last_seen TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    state VARCHAR(16) NOT NULL, 
    CONSTRAINT pk_gpus PRIMARY KEY (id), 
    CONSTRAINT fk_gpus_node_id_nodes FOREIGN KEY(node_id) REFERENCES nodes (id), 
    CONSTRAINT uq_gpus_uuid UNIQUE (uuid)
);

CREATE INDEX ix_gpus_model ON gpus (model);

CREATE INDEX ix_gpus_node_id ON gpus (node_id);

CREATE TABLE job_classes (
    id SERIAL NOT NULL, 
    name VARCHAR(16) NOT NULL, 
    benchmark_id INTEGER, 
    description TEXT NOT NULL, 
    CONSTRAINT pk_job_classes PRIMARY KEY (id), 
    CONSTRAINT fk_job_classes_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT uq_job_classes_name UNIQUE (name)
);

CREATE TABLE classification_results (
    id SERIAL NOT NULL, 
    run_id INTEGER NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    runs INTEGER NOT NULL, 
    median_score DOUBLE PRECISION, 
    perfvar DOUBLE PRECISION, 
    bin INTEGER, 
    slowdown DOUBLE PRECISION, 
    outlier BOOLEAN NOT NULL, 
    profiled BOOLEAN NOT NULL, 
    CONSTRAINT pk_classification_results PRIMARY KEY (id), 
    CONSTRAINT fk_classification_results_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_classification_results_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT fk_classification_results_run_id_classification_runs FOREIGN KEY(run_id) REFERENCES classification_runs (id) ON DELETE CASCADE, 
    CONSTRAINT uq_classification_results_run_id_gpu_id_benchmark_id UNIQUE (run_id, gpu_id, benchmark_id)
);

CREATE TABLE gpu_classes (
    id SERIAL NOT NULL, 
    run_id INTEGER NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    bin INTEGER, 
    slowdown DOUBLE PRECISION, 
    outlier BOOLEAN NOT NULL, 
    profiled BOOLEAN NOT NULL, 
    CONSTRAINT pk_gpu_classes PRIMARY KEY (id), 
    CONSTRAINT fk_gpu_classes_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_gpu_classes_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT fk_gpu_classes_run_id_classification_runs FOREIGN KEY(run_id) REFERENCES classification_runs (id) ON DELETE CASCADE, 
    CONSTRAINT uq_gpu_classes_run_id_gpu_id_job_class UNIQUE (run_id, gpu_id, job_class)
);

CREATE TABLE profile_runs (
    id BIGSERIAL NOT NULL, 
    run_key VARCHAR(64) NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    started_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    duration_s DOUBLE PRECISION, 
    score DOUBLE PRECISION NOT NULL, 
    unit VARCHAR(32) NOT NULL, 
    lower_is_better BOOLEAN NOT NULL, 
    repeats INTEGER, 
    spread DOUBLE PRECISION, 
    sm_clock_mhz DOUBLE PRECISION, 
    mem_clock_mhz DOUBLE PRECISION, 
    power_w DOUBLE PRECISION, 
    temperature_c DOUBLE PRECISION, 
    throttle_reasons BIGINT, 
    driver_version VARCHAR(32), 
    cuda_version VARCHAR(32), 
    source VARCHAR(32) NOT NULL, 
    imported_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_profile_runs PRIMARY KEY (id), 
    CONSTRAINT fk_profile_runs_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_profile_runs_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT uq_profile_runs_run_key UNIQUE (run_key)
);

CREATE INDEX ix_profile_runs_gpu_bench ON profile_runs (gpu_id, benchmark_id);

INSERT INTO alembic_version (version_num) VALUES ('0001') RETURNING alembic_version.version_num;

-- Running upgrade 0001 -> 0002

ALTER TABLE gpus ADD COLUMN power_limit_w DOUBLE PRECISION;

ALTER TABLE gpus ADD COLUMN driver_version VARCHAR(32);

ALTER TABLE gpus ADD COLUMN cuda_version VARCHAR(32);

ALTER TABLE gpus ADD COLUMN vbios_version VARCHAR(64);

ALTER TABLE gpus ADD COLUMN ecc_corrected BIGINT;

ALTER TABLE gpus ADD COLUMN ecc_uncorrected BIGINT;

ALTER TABLE gpus ADD COLUMN retired_pages INTEGER;

ALTER TABLE gpus ADD COLUMN inventoried_at TIMESTAMP WITHOUT TIME ZONE;

CREATE TABLE benchmark_failures (
    id BIGSERIAL NOT NULL, 
    run_key VARCHAR(64) NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    benchmark VARCHAR(64) NOT NULL, 
    started_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    duration_s DOUBLE PRECISION, 
    status VARCHAR(16) NOT NULL, 
    error TEXT NOT NULL, 
    source VARCHAR(32) NOT NULL, 
    recorded_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_benchmark_failures PRIMARY KEY (id), 
    CONSTRAINT fk_benchmark_failures_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT uq_benchmark_failures_run_key UNIQUE (run_key)
);

CREATE INDEX ix_benchmark_failures_gpu_id ON benchmark_failures (gpu_id);

UPDATE alembic_version SET version_num='0002' WHERE alembic_version.version_num = '0001';

-- Running upgrade 0002 -> 0003

CREATE TABLE class_rules (
    id SERIAL NOT NULL, 
    "user" VARCHAR(128), 
    name VARCHAR(255), 
    account VARCHAR(128), 
    partition VARCHAR(128), 
    job_class VARCHAR(16) NOT NULL, 
    note TEXT NOT NULL, 
    created_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_class_rules PRIMARY KEY (id)
);

CREATE TABLE gpu_flags (
    id BIGSERIAL NOT NULL, 
    gpu_uuid VARCHAR(128) NOT NULL, 
    node VARCHAR(255) NOT NULL, 
    kind VARCHAR(32) NOT NULL, 
    expected_mhz DOUBLE PRECISION, 
    observed_mhz DOUBLE PRECISION, 
    detail TEXT NOT NULL, 
    flagged_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    cleared_at TIMESTAMP WITHOUT TIME ZONE, 
    CONSTRAINT pk_gpu_flags PRIMARY KEY (id)
);

CREATE INDEX ix_gpu_flags_gpu_uuid ON gpu_flags (gpu_uuid);

CREATE TABLE job_identities (
    id BIGSERIAL NOT NULL, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    "user" VARCHAR(128) NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    command TEXT NOT NULL, 
    fingerprint VARCHAR(16) NOT NULL, 
    first_seen TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_job_identities PRIMARY KEY (id), 
    CONSTRAINT uq_job_identities_slurm_job_id UNIQUE (slurm_job_id)
);

CREATE INDEX ix_job_identities_fingerprint ON job_identities (fingerprint);

CREATE TABLE job_profiles (
    id BIGSERIAL NOT NULL, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    node VARCHAR(255) NOT NULL, 
    "user" VARCHAR(128), 
    gpu_uuids JSON NOT NULL, 
    gpus INTEGER NOT NULL, 
    started_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    ended_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    duration_s DOUBLE PRECISION NOT NULL, 
    samples INTEGER NOT NULL, 
    gpu_util_mean DOUBLE PRECISION, 
    gpu_util_p95 DOUBLE PRECISION, 
    sm_active_mean DOUBLE PRECISION, 
    mem_bw_util_mean DOUBLE PRECISION, 
    power_w_mean DOUBLE PRECISION, 
    sm_clock_mhz_mean DOUBLE PRECISION, 
    fingerprint VARCHAR(16), 
    recorded_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_job_profiles PRIMARY KEY (id), 
    CONSTRAINT uq_job_profiles_slurm_job_id_node_started_at UNIQUE (slurm_job_id, node, started_at)
);

CREATE INDEX ix_job_profiles_fingerprint ON job_profiles (fingerprint);

CREATE INDEX ix_job_profiles_slurm_job_id ON job_profiles (slurm_job_id);

CREATE TABLE job_sensitivity (
    id SERIAL NOT NULL, 
    fingerprint VARCHAR(16) NOT NULL, 
    "user" VARCHAR(128) NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    compute_score DOUBLE PRECISION NOT NULL, 
    jobs INTEGER NOT NULL, 
    samples BIGINT NOT NULL, 
    gpu_util_mean DOUBLE PRECISION, 
    sm_active_mean DOUBLE PRECISION, 
    mem_bw_util_mean DOUBLE PRECISION, 
    power_w_mean DOUBLE PRECISION, 
    updated_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_job_sensitivity PRIMARY KEY (id), 
    CONSTRAINT uq_job_sensitivity_fingerprint UNIQUE (fingerprint)
);

UPDATE alembic_version SET version_num='0003' WHERE alembic_version.version_num = '0002';

-- Running upgrade 0003 -> 0004

ALTER TABLE placements ADD COLUMN "user" VARCHAR(128);

ALTER TABLE placements ADD COLUMN account VARCHAR(128);

ALTER TABLE placements ADD COLUMN submitted_at TIMESTAMP WITHOUT TIME ZONE;

ALTER TABLE placements ADD COLUMN started_at TIMESTAMP WITHOUT TIME ZONE;

ALTER TABLE placements ADD COLUMN ended_at TIMESTAMP WITHOUT TIME ZONE;

UPDATE alembic_version SET version_num='0004' WHERE alembic_version.version_num = '0003';

-- Running upgrade 0004 -> 0005

ALTER TABLE profile_runs ADD COLUMN quarantine VARCHAR(255);

UPDATE alembic_version SET version_num='0005' WHERE alembic_version.version_num = '0004';

-- Running upgrade 0005 -> 0006

CREATE TABLE job_accounting (
    id BIGSERIAL NOT NULL, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    mode VARCHAR(16) NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    partition VARCHAR(128) NOT NULL, 
    account VARCHAR(128) NOT NULL, 
    "user" VARCHAR(128) NOT NULL, 
    gpus JSON NOT NULL, 
    n_gpus INTEGER NOT NULL, 
    slowest_gpus VARCHAR(1024) NOT NULL, 
    started_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    ended_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    runtime_s DOUBLE PRECISION NOT NULL, 
    slowdown DOUBLE PRECISION, 
    tax_gpu_h DOUBLE PRECISION, 
    alternative VARCHAR(16), 
    alternative_slowdown DOUBLE PRECISION, 
    saved_gpu_h DOUBLE PRECISION, 
    classification_version INTEGER, 
    CONSTRAINT pk_job_accounting PRIMARY KEY (id)
);

CREATE INDEX ix_job_accounting_ended_at ON job_accounting (ended_at);

CREATE INDEX ix_job_accounting_slurm_job_id ON job_accounting (slurm_job_id);

UPDATE alembic_version SET version_num='0006' WHERE alembic_version.version_num = '0005';

-- Running upgrade 0006 -> 0007

CREATE TABLE job_history (
    id BIGSERIAL NOT NULL, 
    source VARCHAR(128) NOT NULL, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    "user" VARCHAR(128) NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    started_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    elapsed_s DOUBLE PRECISION NOT NULL, 
    state VARCHAR(32) NOT NULL, 
    gpus INTEGER, 
    nodes INTEGER, 
    imported_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_job_history PRIMARY KEY (id), 
    CONSTRAINT uq_job_history_source_slurm_job_id_started_at UNIQUE (source, slurm_job_id, started_at)
);

CREATE INDEX ix_job_history_started_at ON job_history (started_at);

UPDATE alembic_version SET version_num='0007' WHERE alembic_version.version_num = '0006';

-- Running upgrade 0007 -> 0008

ALTER TABLE job_accounting ADD COLUMN fingerprint VARCHAR(16);

ALTER TABLE job_accounting ADD COLUMN time_limit_s DOUBLE PRECISION;

ALTER TABLE job_history ADD COLUMN node_list VARCHAR(1024);

CREATE TABLE gpu_passive_speed (
    id SERIAL NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    factor DOUBLE PRECISION NOT NULL, 
    low DOUBLE PRECISION NOT NULL, 
    high DOUBLE PRECISION NOT NULL, 
    jobs INTEGER NOT NULL, 
    paced INTEGER NOT NULL, 
    gpu_hours DOUBLE PRECISION NOT NULL, 
    computed_at TIMESTAMP WITHOUT TIME ZONE NOT NULL, 
    CONSTRAINT pk_gpu_passive_speed PRIMARY KEY (id), 
    CONSTRAINT fk_gpu_passive_speed_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT uq_gpu_passive_speed_gpu_id_job_class UNIQUE (gpu_id, job_class)
);

CREATE INDEX ix_gpu_passive_speed_gpu_id ON gpu_passive_speed (gpu_id);

UPDATE alembic_version SET version_num='0008' WHERE alembic_version.version_num = '0007';

COMMIT;

