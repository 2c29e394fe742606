"""The tuning database (SQLite): tuned choices with full statistics, keyed by problem and machine."""

from .store import (
    ENV_VAR,
    FILE_SCHEMA_VERSION,
    SCHEMA_VERSION,
    VERSION_KEYS,
    DatabaseCorrupt,
    DatabaseReadOnly,
    Lookup,
    Record,
    TuningDB,
    default_path,
    split_env,
)

__all__ = ["ENV_VAR", "FILE_SCHEMA_VERSION", "SCHEMA_VERSION", "VERSION_KEYS", "DatabaseCorrupt",
           "DatabaseReadOnly", "Lookup", "Record", "TuningDB", "default_path", "split_env"]
