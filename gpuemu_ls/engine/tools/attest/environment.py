"""Whether ``verify --replay`` runs where the recorded run ran: the same Python, libraries and platform. A verdict
that differs on replay where they are the same is a contradiction; where they are not, it may come from them
alone, and is not reproducible here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...report.libraries import differences, library_versions, shown
from ...report.provenance import machine as machine_here


@dataclass(frozen=True)
class Environment:
    differences: list[str]  # "torch 2.13.0 recorded, 2.12.1 here", "platform Linux x86_64 recorded, ..."
    libraries_known: bool  # False: a report made before gpuemu recorded library versions
    here: dict[str, str]

    @property
    def why(self) -> str | None:
        """``library versions differ: torch 2.13.0 recorded, 2.12.1 here``; None where nothing differs."""
        if not self.differences:
            return None
        if len(self.differences) == 1 and self.differences[0].startswith("platform "):
            return f"the platform differs: {self.differences[0].removeprefix('platform ')}"
        return f"library versions differ: {', '.join(self.differences)}"

    def notes(self) -> list[str]:
        out = []
        if self.why:
            out.append(f"{self.why}: a verdict that differs on replay may come from them alone (not reproducible here)")
        if not self.libraries_known:
            out.append(
                "the report records no library versions (made before gpuemu recorded them): they are unknown, and a "
                f"verdict that differs on replay reads as contradicted; here: {shown(self.here)}"
            )
        elif not self.differences:
            out.append(f"Python, libraries and platform as recorded: {shown(self.here)}")
        return out


def _platform(machine: dict[str, Any]) -> str | None:
    """``Linux x86_64``: the OS family (``platform.platform()``'s first word) and the architecture."""
    os_name, arch = machine.get("os"), machine.get("arch")
    if not isinstance(os_name, str) or not isinstance(arch, str):
        return None
    return f"{os_name.split('-')[0]} {arch}"


def compare(prov: dict[str, Any]) -> Environment:
    """The recorded environment of provenance record ``prov`` against this interpreter's."""
    here = library_versions()
    machine = prov.get("machine") if isinstance(prov.get("machine"), dict) else {}
    recorded = prov.get("libraries")
    known = isinstance(recorded, dict)
    if known:
        diffs = differences({str(k): str(v) for k, v in recorded.items()}, here)
    elif machine.get("python"):  # an older record: its Python is all it says
        diffs = differences({"python": str(machine["python"])}, {"python": here["python"]})
    else:
        diffs = []
    was, now = _platform(machine), _platform(machine_here())  # read as the recorded one was
    if was and was != now:
        diffs.append(f"platform {was} recorded, {now} here")
    return Environment(diffs, known, here)


__all__ = ["Environment", "compare"]
