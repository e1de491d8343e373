"""Data the evaluations and benches read: infill cases, released package sources, and the
statistics every report prints."""
