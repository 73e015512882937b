CREATE TABLE alembic_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> 0001

CREATE TABLE benchmarks (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    name VARCHAR(64) NOT NULL, 
    unit VARCHAR(32) NOT NULL, 
    lower_is_better BOOL NOT NULL, 
    description TEXT NOT NULL, 
    CONSTRAINT pk_benchmarks PRIMARY KEY (id), 
    CONSTRAINT uq_benchmarks_name UNIQUE (name)
);

CREATE TABLE classification_runs (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    version INTEGER NOT NULL, 
    created_at DATETIME(6) NOT NULL, 
    params JSON NOT NULL, 
    previous_version INTEGER, 
    note TEXT NOT NULL, 
    CONSTRAINT pk_classification_runs PRIMARY KEY (id), 
    CONSTRAINT uq_classification_runs_version UNIQUE (version)
);

CREATE TABLE nodes (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    name VARCHAR(255) NOT NULL, 
    first_seen DATETIME(6) NOT NULL, 
    last_seen DATETIME(6) NOT NULL, 
    CONSTRAINT pk_nodes PRIMARY KEY (id), 
    CONSTRAINT uq_nodes_name UNIQUE (name)
);

CREATE TABLE placements (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    policy VARCHAR(64) NOT NULL, 
    job_class VARCHAR(16), 
    classification_version INTEGER, 
    gpus JSON NOT NULL, 
    alternatives JSON, 
    reason TEXT NOT NULL, 
    outcome VARCHAR(32) NOT NULL, 
    decided_at DATETIME(6) NOT NULL, 
    applied_at DATETIME(6), 
    CONSTRAINT pk_placements PRIMARY KEY (id)
);

CREATE INDEX ix_placements_slurm_job_id ON placements (slurm_job_id);

CREATE TABLE classification_bins (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    run_id INTEGER NOT NULL, 
    model VARCHAR(128) NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    bin INTEGER NOT NULL, 
    centroid DOUBLE NOT NULL, 
    slowdown DOUBLE NOT NULL, 
    gpus INTEGER NOT NULL, 
    outlier BOOL NOT NULL, 
    low DOUBLE NOT NULL, 
    high DOUBLE NOT NULL, 
    CONSTRAINT pk_classification_bins PRIMARY KEY (id), 
    CONSTRAINT fk_classification_bins_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_classification_bins_run_id_classification_runs FOREIGN KEY(run_id) REFERENCES classification_runs (id) ON DELETE CASCADE, 
    CONSTRAINT uq_classification_bins_run_id_model_benchmark_id_bin UNIQUE (run_id, model, benchmark_id, bin)
);

CREATE TABLE gpus (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    uuid VARCHAR(128) NOT NULL, 
    node_id INTEGER, 
    nvml_index INTEGER, 
    minor_number INTEGER, 
    pci_bus_id VARCHAR(32), 
    model VARCHAR(128) NOT NULL, 
    serial VARCHAR(64), 
    memory_mib INTEGER, 
    first_seen DATETIME(6) NOT NULL, 
    last_seen DATETIME(6) NOT NULL, 
    state VARCHAR(16) NOT NULL, 
    CONSTRAINT pk_gpus PRIMARY KEY (id), 
    CONSTRAINT fk_gpus_node_id_nodes FOREIGN KEY(node_id) REFERENCES nodes (id), 
    CONSTRAINT uq_gpus_uuid UNIQUE (uuid)
);

CREATE INDEX ix_gpus_model ON gpus (model);

CREATE INDEX ix_gpus_node_id ON gpus (node_id);

CREATE TABLE job_classes (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    name VARCHAR(16) NOT NULL, 
    benchmark_id INTEGER, 
    description TEXT NOT NULL, 
    CONSTRAINT pk_job_classes PRIMARY KEY (id), 
    CONSTRAINT fk_job_classes_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT uq_job_classes_name UNIQUE (name)
);

CREATE TABLE classification_results (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    run_id INTEGER NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    runs INTEGER NOT NULL, 
    median_score DOUBLE, 
    perfvar DOUBLE, 
    bin INTEGER, 
    slowdown DOUBLE, 
    outlier BOOL NOT NULL, 
    profiled BOOL NOT NULL, 
    CONSTRAINT pk_classification_results PRIMARY KEY (id), 
    CONSTRAINT fk_classification_results_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_classification_results_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT fk_classification_results_run_id_classification_runs FOREIGN KEY(run_id) REFERENCES classification_runs (id) ON DELETE CASCADE, 
    CONSTRAINT uq_classification_results_run_id_gpu_id_benchmark_id UNIQUE (run_id, gpu_id, benchmark_id)
);

CREATE TABLE gpu_classes (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    run_id INTEGER NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    bin INTEGER, 
    slowdown DOUBLE, 
    outlier BOOL NOT NULL, 
    profiled BOOL NOT NULL, 
    CONSTRAINT pk_gpu_classes PRIMARY KEY (id), 
    CONSTRAINT fk_gpu_classes_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_gpu_classes_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT fk_gpu_classes_run_id_classification_runs FOREIGN KEY(run_id) REFERENCES classification_runs (id) ON DELETE CASCADE, 
    CONSTRAINT uq_gpu_classes_run_id_gpu_id_job_class UNIQUE (run_id, gpu_id, job_class)
);

CREATE TABLE profile_runs (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    run_key VARCHAR(64) NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    benchmark_id INTEGER NOT NULL, 
    started_at DATETIME(6) NOT NULL, 
    duration_s DOUBLE, 
    score DOUBLE NOT NULL, 
    unit VARCHAR(32) NOT NULL, 
    lower_is_better BOOL NOT NULL, 
    repeats INTEGER, 
    spread DOUBLE, 
    sm_clock_mhz DOUBLE, 
    mem_clock_mhz DOUBLE, 
    power_w DOUBLE, 
    temperature_c DOUBLE, 
    throttle_reasons BIGINT, 
    driver_version VARCHAR(32), 
    cuda_version VARCHAR(32), 
    source VARCHAR(32) NOT NULL, 
    imported_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_profile_runs PRIMARY KEY (id), 
    CONSTRAINT fk_profile_runs_benchmark_id_benchmarks FOREIGN KEY(benchmark_id) REFERENCES benchmarks (id), 
    CONSTRAINT fk_profile_runs_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT uq_profile_runs_run_key UNIQUE (run_key)
);

CREATE INDEX ix_profile_runs_gpu_bench ON profile_runs (gpu_id, benchmark_id);

INSERT INTO alembic_version (version_num) VALUES ('0001');

-- Running upgrade 0001 -> 0002

ALTER TABLE gpus ADD COLUMN power_limit_w DOUBLE;

ALTER TABLE gpus ADD COLUMN driver_version VARCHAR(32);

ALTER TABLE gpus ADD COLUMN cuda_version VARCHAR(32);

ALTER TABLE gpus ADD COLUMN vbios_version VARCHAR(64);

ALTER TABLE gpus ADD COLUMN ecc_corrected BIGINT;

ALTER TABLE gpus ADD COLUMN ecc_uncorrected BIGINT;

ALTER TABLE gpus ADD COLUMN retired_pages INTEGER;

ALTER TABLE gpus ADD COLUMN inventoried_at DATETIME(6);

CREATE TABLE benchmark_failures (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    run_key VARCHAR(64) NOT NULL, 
    gpu_id INTEGER NOT NULL, 
    benchmark VARCHAR(64) NOT NULL, 
    started_at DATETIME(6) NOT NULL, 
    duration_s DOUBLE, 
    status VARCHAR(16) NOT NULL, 
    error TEXT NOT NULL, 
    source VARCHAR(32) NOT NULL, 
    recorded_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_benchmark_failures PRIMARY KEY (id), 
    CONSTRAINT fk_benchmark_failures_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT uq_benchmark_failures_run_key UNIQUE (run_key)
);

CREATE INDEX ix_benchmark_failures_gpu_id ON benchmark_failures (gpu_id);

UPDATE alembic_version SET version_num='0002' WHERE alembic_version.version_num = '0001';

-- Running upgrade 0002 -> 0003

CREATE TABLE class_rules (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    user VARCHAR(128), 
    name VARCHAR(255), 
    account VARCHAR(128), 
    `partition` VARCHAR(128), 
    job_class VARCHAR(16) NOT NULL, 
    note TEXT NOT NULL, 
    created_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_class_rules PRIMARY KEY (id)
);

CREATE TABLE gpu_flags (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    gpu_uuid VARCHAR(128) NOT NULL, 
    node VARCHAR(255) NOT NULL, 
    kind VARCHAR(32) NOT NULL, 
    expected_mhz DOUBLE, 
    observed_mhz DOUBLE, 
    detail TEXT NOT NULL, 
    flagged_at DATETIME(6) NOT NULL, 
    cleared_at DATETIME(6), 
    CONSTRAINT pk_gpu_flags PRIMARY KEY (id)
);

CREATE INDEX ix_gpu_flags_gpu_uuid ON gpu_flags (gpu_uuid);

CREATE TABLE job_identities (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    user VARCHAR(128) NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    command TEXT NOT NULL, 
    fingerprint VARCHAR(16) NOT NULL, 
    first_seen DATETIME(6) NOT NULL, 
    CONSTRAINT pk_job_identities PRIMARY KEY (id), 
    CONSTRAINT uq_job_identities_slurm_job_id UNIQUE (slurm_job_id)
);

CREATE INDEX ix_job_identities_fingerprint ON job_identities (fingerprint);

CREATE TABLE job_profiles (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    node VARCHAR(255) NOT NULL, 
    user VARCHAR(128), 
    gpu_uuids JSON NOT NULL, 
    gpus INTEGER NOT NULL, 
    started_at DATETIME(6) NOT NULL, 
    ended_at DATETIME(6) NOT NULL, 
    duration_s DOUBLE NOT NULL, 
    samples INTEGER NOT NULL, 
    gpu_util_mean DOUBLE, 
    gpu_util_p95 DOUBLE, 
    sm_active_mean DOUBLE, 
    mem_bw_util_mean DOUBLE, 
    power_w_mean DOUBLE, 
    sm_clock_mhz_mean DOUBLE, 
    fingerprint VARCHAR(16), 
    recorded_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_job_profiles PRIMARY KEY (id), 
    CONSTRAINT uq_job_profiles_slurm_job_id_node_started_at UNIQUE (slurm_job_id, node, started_at)
);

CREATE INDEX ix_job_profiles_fingerprint ON job_profiles (fingerprint);

CREATE INDEX ix_job_profiles_slurm_job_id ON job_profiles (slurm_job_id);

CREATE TABLE job_sensitivity (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    fingerprint VARCHAR(16) NOT NULL, 
    user VARCHAR(128) NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    compute_score DOUBLE NOT NULL, 
    jobs INTEGER NOT NULL, 
    samples BIGINT NOT NULL, 
    gpu_util_mean DOUBLE, 
    sm_active_mean DOUBLE, 
    mem_bw_util_mean DOUBLE, 
    power_w_mean DOUBLE, 
    updated_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_job_sensitivity PRIMARY KEY (id), 
    CONSTRAINT uq_job_sensitivity_fingerprint UNIQUE (fingerprint)
);

UPDATE alembic_version SET version_num='0003' WHERE alembic_version.version_num = '0002';

-- Running upgrade 0003 -> 0004

ALTER TABLE placements ADD COLUMN user VARCHAR(128);

ALTER TABLE placements ADD COLUMN account VARCHAR(128);

ALTER TABLE placements ADD COLUMN submitted_at DATETIME(6);

ALTER TABLE placements ADD COLUMN started_at DATETIME(6);

ALTER TABLE placements ADD COLUMN ended_at DATETIME(6);

UPDATE alembic_version SET version_num='0004' WHERE alembic_version.version_num = '0003';

-- Running upgrade 0004 -> 0005

ALTER TABLE profile_runs ADD COLUMN quarantine VARCHAR(255);

UPDATE alembic_version SET version_num='0005' WHERE alembic_version.version_num = '0004';

-- Running upgrade 0005 -> 0006

CREATE TABLE job_accounting (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    mode VARCHAR(16) NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    `partition` VARCHAR(128) NOT NULL, 
    account VARCHAR(128) NOT NULL, 
    user VARCHAR(128) NOT NULL, 
    gpus JSON NOT NULL, 
    n_gpus INTEGER NOT NULL, 
    slowest_gpus VARCHAR(1024) NOT NULL, 
    started_at DATETIME(6) NOT NULL, 
    ended_at DATETIME(6) NOT NULL, 
    runtime_s DOUBLE NOT NULL, 
    slowdown DOUBLE, 
    tax_gpu_h DOUBLE, 
    alternative VARCHAR(16), 
    alternative_slowdown DOUBLE, 
    saved_gpu_h DOUBLE, 
    classification_version INTEGER, 
    CONSTRAINT pk_job_accounting PRIMARY KEY (id)
);

CREATE INDEX ix_job_accounting_ended_at ON job_accounting (ended_at);

CREATE INDEX ix_job_accounting_slurm_job_id ON job_accounting (slurm_job_id);

UPDATE alembic_version SET version_num='0006' WHERE alembic_version.version_num = '0005';

-- Running upgrade 0006 -> 0007

CREATE TABLE job_history (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    source VARCHAR(128) NOT NULL, 
    slurm_job_id VARCHAR(64) NOT NULL, 
    user VARCHAR(128) NOT NULL, 
    name VARCHAR(255) NOT NULL, 
    started_at DATETIME(6) NOT NULL, 
    elapsed_s DOUBLE NOT NULL, 
    state VARCHAR(32) NOT NULL, 
    gpus INTEGER, 
    nodes INTEGER, 
    imported_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_job_history PRIMARY KEY (id), 
    CONSTRAINT uq_job_history_source_slurm_job_id_started_at UNIQUE (source, slurm_job_id, started_at)
);

CREATE INDEX ix_job_history_started_at ON job_history (started_at);

UPDATE alembic_version SET version_num='0007' WHERE alembic_version.version_num = '0006';

-- Running upgrade 0007 -> 0008

ALTER TABLE job_accounting ADD COLUMN fingerprint VARCHAR(16);

ALTER TABLE job_accounting ADD COLUMN time_limit_s DOUBLE;

ALTER TABLE job_history ADD COLUMN node_list VARCHAR(1024);

CREATE TABLE gpu_passive_speed (
    id INTEGER NOT NULL AUTO_INCREMENT, 
    gpu_id INTEGER NOT NULL, 
    job_class VARCHAR(16) NOT NULL, 
    factor DOUBLE NOT NULL, 
    low DOUBLE NOT NULL, 
    high DOUBLE NOT NULL, 
    jobs INTEGER NOT NULL, 
    paced INTEGER NOT NULL, 
    gpu_hours DOUBLE NOT NULL, 
    computed_at DATETIME(6) NOT NULL, 
    CONSTRAINT pk_gpu_passive_speed PRIMARY KEY (id), 
    CONSTRAINT fk_gpu_passive_speed_gpu_id_gpus FOREIGN KEY(gpu_id) REFERENCES gpus (id), 
    CONSTRAINT uq_gpu_passive_speed_gpu_id_job_class UNIQUE (gpu_id, job_class)
);

CREATE INDEX ix_gpu_passive_speed_gpu_id ON gpu_passive_speed (gpu_id);

UPDATE alembic_version SET version_num='0008' WHERE alembic_version.version_num = '0007';

