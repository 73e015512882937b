"""Reports: `data` builds the variability report (its JSON shape is docs/report-json.md) from a
stored classification, `fairness` the GPU-hours and waits per account and user, `numfmt` the one
number format; `page`, `tables` and `plots` render the HTML page; `service` loads what each needs.
"""
