"""Every file a run writes, one row each: its setting, what it is, its writer and what it
needs; the export formats, one renderer and one row each. The plugin's options, a
:class:`~pytest_specdecode.run.record.RunRecord`'s keywords and the command line
(``python -m pytest_specdecode html|export``) all ask these tables."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..baselines import files
from ..baselines.outputs import check_writable, same_file
from ..baselines.report import Report
from ..errors import ConfigError
from ..reporting import export
from ..reporting.checklist import checklists
from ..settings import BY_NAME, GlobalSettings


def json_text(document: Any) -> str:
    """A document as the JSON text of a file (no NaN or infinity: they are refused)."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


@dataclass(frozen=True)
class ExportFormat:
    """A format for history trackers: ``render`` turns a report (the typed
    :class:`~pytest_specdecode.baselines.report.Report`) into its document, ``text`` the
    document into the file's text; ``empty`` is why an empty document is refused (None: an
    empty one is written)."""

    name: str
    help: str
    render: Callable[[Report], Any]
    text: Callable[[Any], str] = json_text
    empty: str | None = None

    def write(self, path: str, report: Report) -> None:
        files.atomic_write_text(path, self.document_text(report, "this run"))

    def document_text(self, report: Report, where: str) -> str:
        """The file's text for ``report``; a :class:`ConfigError` naming ``where`` when the
        report holds nothing this format takes."""
        if not report.results and not report.loads:
            raise ConfigError(f"{where}: holds no results to export")
        document = self.render(report)
        if self.empty is not None and not document:
            raise ConfigError(f"{where}: {self.empty}")
        return self.text(document)


#: The export formats (``--specdecode-export FORMAT=PATH``, ``RunRecord(export=...)``,
#: ``python -m pytest_specdecode export --format FORMAT``).
EXPORTS: tuple[ExportFormat, ...] = (
    ExportFormat("bmf", "Bencher Metric Format (bencher run --adapter json)", export.bmf),
    ExportFormat(
        "github-action-benchmark",
        "github-action-benchmark's customBiggerIsBetter list",
        export.github_action_benchmark,
    ),
    ExportFormat(
        "github-action-benchmark-smaller",
        "github-action-benchmark's customSmallerIsBetter list of the phase figures (break-even "
        "length, draft share, verify cost)",
        export.github_action_benchmark_smaller,
        empty="holds no phase figures to export (served engines have none, and reports from "
        "before phase timing neither); export the other formats",
    ),
    ExportFormat(
        "csv",
        "the bmf figures as CSV, one line per benchmark and measure (value, 95% interval)",
        export.csv_text,
        text=str,
    ),
)
EXPORT_BY_NAME = {f.name: f for f in EXPORTS}


def with_checklist(report: Report) -> Report:
    """``report`` with its ``checklist`` made from its results and loads (none without)."""
    made = [c.to_dict() for c in checklists(report)] if report.results or report.loads else None
    return replace(report, checklist=made)


def _save(path: str, report: Report) -> None:
    """Merge into the saved run at ``path``; the merged file's checklist is made again."""

    def derive(data: dict[str, Any]) -> dict[str, Any]:
        return with_checklist(Report.from_dict(data, f"saved run {path}")).to_dict()

    files.save_run(path, report.to_dict(), derive=derive)


def _html(path: str, report: Report) -> None:
    from ..reporting.html import render_html

    files.atomic_write_text(path, render_html(report))


@dataclass(frozen=True)
class Output:
    """A file a run writes at its end: the setting that names its path, what it is (in
    messages), how it is written from the report, and a module it needs (with the install
    hint)."""

    setting: str
    what: str
    write: Callable[[str, Report], Any]
    needs: tuple[str, str] | None = None


#: The files a run writes, in the order they are written (the export formats follow, and an
#: updated baseline comes last).
OUTPUTS: tuple[Output, ...] = (
    Output("report", "report", lambda p, r: files.write(p, r.to_dict())),
    Output("save", "saved run", _save),
    Output(
        "html",
        "HTML report",
        _html,
        needs=("matplotlib", "pip install 'pytest-specdecode[html]' (or matplotlib)"),
    ),  # fmt: skip
)


@dataclass(frozen=True)
class Planned:
    """One file this run will write: its name in the summary, where it was asked for, its
    path and its writer."""

    name: str
    where: str
    path: str
    write: Callable[[str, Report], Any]


def where(settings: GlobalSettings, name: str) -> str:
    """How a setting is named in a message: its option (and the ini or keyword it came from
    when not the command line)."""
    option, source = BY_NAME[name].option, settings.source(name)
    return option if source == option else f"{option} (from {source})"


def planned(settings: GlobalSettings) -> list[Planned]:
    """Every file the settings ask for (the updated baseline aside), in writing order."""
    out = [
        Planned(o.setting, where(settings, o.setting), settings.get(o.setting), o.write)
        for o in OUTPUTS
        if settings.get(o.setting)
    ]
    for name, path in settings.export or ():
        fmt = EXPORT_BY_NAME.get(name)
        if fmt is None:
            raise ConfigError(
                f"{where(settings, 'export')}: unknown format {name!r}; known: "
                + ", ".join(EXPORT_BY_NAME)
            )
        out.append(Planned(f"export {name}", where(settings, "export"), path, fmt.write))
    return out


def check_outputs(settings: GlobalSettings) -> None:
    """Before anything runs: every output path can be written, no two outputs share a path,
    none overwrites the baseline being compared, and what an output needs is installed."""
    paths = planned(settings)
    for output in paths:
        check_writable(output.path, output.where)
    compare = settings.compare
    if compare and settings.update_baseline:
        check_writable(compare, "--specdecode-compare (updated by --specdecode-update-baseline)")
    if settings.save:  # merged into at the end: refuse now a file that cannot be
        files.load_to_merge(settings.save, where(settings, "save"))
    for i, output in enumerate(paths):
        for other in paths[i + 1 :]:
            if same_file(output.path, other.path):
                raise ConfigError(
                    f"{output.where} and {other.where} name the same file {output.path!r}; "
                    "give each output its own path"
                )
        if compare and same_file(output.path, compare):
            raise ConfigError(
                f"{output.where} {output.path!r} is the baseline given to --specdecode-compare: "
                "writing it would replace the stored figures with this run's. Save elsewhere, "
                "or refresh the baseline on purpose with --specdecode-update-baseline"
            )
    for row in OUTPUTS:
        if row.needs and settings.get(row.setting):
            module, hint = row.needs
            if importlib.util.find_spec(module) is None:
                raise ConfigError(
                    f"{where(settings, row.setting)} needs {module} for the {row.what}: {hint}"
                )
