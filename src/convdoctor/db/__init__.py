"""The tuning database (SQLite): tuned choices with full statistics, keyed by problem and machine."""

from .store import (
    ENV_VAR,
    SCHEMA_VERSION,
    VERSION_KEYS,
    DatabaseCorrupt,
    Lookup,
    Record,
    TuningDB,
    default_path,
    split_env,
)

__all__ = ["ENV_VAR", "SCHEMA_VERSION", "VERSION_KEYS", "DatabaseCorrupt", "Lookup", "Record",
           "TuningDB", "default_path", "split_env"]
