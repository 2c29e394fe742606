"""The sections of a report page, in the order they appear.

Adding a section is one module with a `SECTION` (`model.Section`) and one entry here.
"""

from __future__ import annotations

from . import sec_bench, sec_machine, sec_optimize, sec_roofline, sec_tuning
from .model import Section

SECTIONS: tuple[Section, ...] = (
    sec_machine.SECTION,
    sec_tuning.SECTION,
    sec_roofline.SECTION,
    sec_bench.SECTION,
    sec_optimize.SECTION,
)
