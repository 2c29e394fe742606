"""Scripts the doctor runs in child processes (stdlib only, never import convdoctor).

Each prints one JSON object (or one JSON line per item) on stdout, so a library that segfaults or
hangs on load costs a finding, not the doctor.
"""
