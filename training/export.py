def export_all(work, models, peregrine, log):
    log("export: not implemented yet; rerun with --export-only")
