"""Job sensitivity: fingerprints that survive resubmission, classes learned from job profiles, rules."""
