"""Job sensitivity: fingerprints that survive resubmission, classes learned from job profiles, rules;
learned runtimes (from job profiles and imported sacct exports), and `service`, the import use case."""
