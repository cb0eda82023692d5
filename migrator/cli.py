"""The ``npu-migrate`` command line.

Exit codes: 2 when anything failed (a usage error, a bad configuration, an unreadable path, a file
that could not be processed), else 1 when ``--diff``/``--check`` found something that would
change (or ``--check`` found manual-review diagnostics left), or when the default mode rewrote a
file (pyupgrade's convention, which makes a pre-commit hook fail), else 0.

Never interactive: nothing here reads from stdin or asks a question.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import migrator
from migrator import api_tables, report
from migrator.config import ConfigError, FileConfig, common_folder, find_pyproject, load_config
from migrator.diagnostics import Severity
from migrator.originals import Originals
from migrator.registry import (
    RuleEntry,
    UnknownRuleError,
    all_rules,
    rule_by_code,
    rule_entries,
    rule_names,
    select_codes,
)
from migrator.results import Status
from migrator.rule import Rule
from migrator.runner import (
    Discovery,
    Excluder,
    Job,
    Mode,
    ResultCache,
    RunResult,
    cache_key,
    default_cache_dir,
    discover,
)
from migrator.runner import run as run_tasks
from migrator.settings import AmpPolicy, Settings, Target
from migrator.shell import DEFAULT_PATTERNS as DEFAULT_SHELL_PATTERNS
from migrator.shell import shell_scripts
from migrator.statistics import statistic_lines, statistics

if TYPE_CHECKING:  # imported where the options ask for them (a clean --check needs none)
    from migrator.baseline import Baseline
    from migrator.formats import ProjectPaths

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2
HTML_REPORT_DIR = Path("npu-migrate-report")  # --format html without --report-dir
HTML_REPORT_NAME = "index.html"
PROGRESS_MIN_FILES = 200  # below this a run is short enough without a progress bar


class UsageError(click.UsageError):
    """Exit 2, like click's own usage errors."""


class RuleLoadError(Exception):
    """A module under rules/ cannot be imported: no run can be trusted, so none starts."""


# The report formats (migrator.formats.FORMATS), named here so that --help and a run that
# asks for none do not import them; tests/test_cli.py checks the two lists agree.
REPORT_FORMATS = ("sarif", "github", "csv", "html")


def load_rules() -> tuple[RuleEntry, ...]:
    """Every rule's entry (the registry's manifest; every rule imported where it is stale)."""
    try:
        return rule_entries()
    except Exception as error:
        raise RuleLoadError(f"cannot load the rules: {type(error).__name__}: {error}") from error


def load_rule_classes() -> tuple[type[Rule], ...]:
    try:
        return all_rules()
    except Exception as error:
        raise RuleLoadError(f"cannot load the rules: {type(error).__name__}: {error}") from error


def split_codes(values: Sequence[str]) -> tuple[str, ...]:
    """``--select NPU1,NPU301 --select NPU2`` -> ("NPU1", "NPU301", "NPU2")."""
    return tuple(code.strip().upper() for value in values for code in value.split(",") if code)


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Exit codes: 0 nothing to do or done cleanly; 1 files changed (default mode) or would "
    "change / need manual review (--diff, --check); 2 usage, configuration or file errors. "
    "npu-migrate verify --help: check on CPU that a migrated program trains like the original.",
)
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=str))
@click.option("--diff", "show_diff", is_flag=True, help="Write nothing; print a unified diff.")
@click.option("--check", is_flag=True, help="Write nothing; list what still needs migration.")
@click.option(
    "--add-suppressions",
    is_flag=True,
    help="Write `# npu-migrate: ignore[CODE]` at every manual and info finding left; apply no "
    "fix. Exits as --check would afterwards.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write a migrated copy of the tree into DIR; leave the input untouched.",
)
@click.option("--select", multiple=True, metavar="CODES", help="Run only these codes/prefixes.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Do not run these codes/prefixes.")
@click.option("--list-rules", is_flag=True, help="List the rules and exit.")
@click.option("--explain", metavar="CODE", help="Print a rule's documentation and exit.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json", *REPORT_FORMATS]),
    default="text",
    show_default=True,
    help="json: one document on stdout (schema in docs/cli.md); sarif: a SARIF 2.1.0 log on "
    "stdout; github: workflow annotations on stdout; csv: text output, and msFmkTransplt's "
    "change_list.csv and unsupported_api.csv in --csv-dir (default: the current folder); "
    "html: text output, and a review page in --report-dir (default: npu-migrate-report/).",
)
@click.option(
    "--baseline",
    "baseline_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Report only findings not recorded in this baseline file; list its stale entries "
    "[config: baseline].",
)
@click.option(
    "--write-baseline",
    is_flag=True,
    help="Record this run's manual and info findings in the --baseline file.",
)
@click.option("--no-baseline", is_flag=True, help="Ignore the baseline of the configuration.")
@click.option(
    "--statistics",
    "show_statistics",
    is_flag=True,
    help="Print one line per rule code with its counts instead of every finding.",
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="--format html: write the review page as DIR/index.html.",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the HTML review page to FILE (any format, any mode).",
)
@click.option(
    "--report",
    "report_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the JSON document to FILE.",
)
@click.option(
    "--csv-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write change_list.csv and unsupported_api.csv into DIR.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Worker processes (1: none) [default: as many as the work pays for, up to the CPU count].",
)
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip matching paths (repeatable).")
@click.option(
    "--target",
    type=click.Choice([target.value for target in Target]),
    help="Migrate device code to torch.npu or to torch.accelerator [default: npu].",
)
@click.option(
    "--amp",
    type=click.Choice([policy.value for policy in AmpPolicy]),
    help="How an amp.initialize that runs only on some paths counts for NPU101/NPU102: "
    "as-written keeps every path working (the class picked by amp's condition), always treats "
    "it as reached "
    "(apex.optimizers + combine_grad=True) [default: as-written; config: amp].",
)
@click.option(
    "--unsafe-fixes/--no-unsafe-fixes",
    default=None,
    help="Apply the fixes of unsafe rules instead of reporting them.",
)
@click.option(
    "--torch-npu-version",
    metavar="VERSION",
    help="torch_npu release whose API table NPU930/NPU931 use, e.g. 2.7.1 [default: the newest "
    f"table, {api_tables.newest_release()}].",
)
@click.option(
    "--include-shell/--no-include-shell",
    default=None,
    help="Also scan shell launch scripts (*.sh, *.bash) for CUDA settings; report only, never "
    "rewritten [config: include-shell = true or a list of patterns].",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Result cache folder [default: $XDG_CACHE_HOME/npu-migrate].",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read [tool.npu-migrate] from this file instead of the nearest pyproject.toml.",
)
@click.option("--color/--no-color", default=None, help="Colour output [default: on a terminal].")
@click.option("-q", "--quiet", is_flag=True, help="Print only errors, the diff and JSON output.")
@click.option("-v", "--verbose", is_flag=True, help="Also print every edit and every skipped file.")
@click.version_option(migrator.__version__, prog_name="npu-migrate")
def command(**options: Any) -> int:
    """Rewrite PyTorch + NVIDIA apex training code for Huawei Ascend NPUs.

    PATH is a file or a folder (searched recursively). By default files are rewritten in place.
    """
    return execute(Options(**options))


@dataclass(frozen=True)
class Options:
    paths: tuple[str, ...]
    show_diff: bool
    check: bool
    add_suppressions: bool
    output: Path | None
    select: tuple[str, ...]
    ignore: tuple[str, ...]
    list_rules: bool
    explain: str | None
    output_format: str
    baseline_file: Path | None
    write_baseline: bool
    no_baseline: bool
    show_statistics: bool
    report_dir: Path | None
    html_file: Path | None
    report_file: Path | None
    csv_dir: Path | None
    jobs: int | None
    exclude: tuple[str, ...]
    target: str | None
    amp: str | None
    unsafe_fixes: bool | None
    torch_npu_version: str | None
    include_shell: bool | None
    no_cache: bool
    cache_dir: Path | None
    config_file: Path | None
    color: bool | None
    quiet: bool
    verbose: bool

    @property
    def mode(self) -> Mode:
        chosen = [
            name
            for name, on in (
                ("--diff", self.show_diff),
                ("--check", self.check),
                ("--output", self.output is not None),
                ("--add-suppressions", self.add_suppressions),
            )
            if on
        ]
        if len(chosen) > 1:
            raise UsageError(f"{' and '.join(chosen)} cannot be combined")
        if self.show_diff:
            return Mode.DIFF
        if self.check or self.add_suppressions:
            return Mode.CHECK
        return Mode.OUTPUT if self.output is not None else Mode.WRITE


class Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C, so workers are stopped and no write is half done."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``npu-migrate`` and ``python -m migrator``; returns the exit code."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    arguments = list(argv) if argv is not None else sys.argv[1:]
    entry_point, prog_name = command, "npu-migrate"
    if arguments[:1] == ["verify"]:  # the one subcommand; a folder named verify: pass ./verify
        from migrator.verify.command import verify_command  # loaded only when asked for

        entry_point, prog_name, arguments = verify_command, "npu-migrate verify", arguments[1:]
    try:
        code = entry_point.main(args=arguments, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
        click.echo("npu-migrate: interrupted; files already written are complete", err=True)
        return 130
    except Terminated:
        click.echo("npu-migrate: terminated; files already written are complete", err=True)
        return 143
    except click.ClickException as error:
        error.show()
        return EXIT_ERROR
    except RuleLoadError as error:
        click.echo(f"error: {error}", err=True)
        return EXIT_ERROR
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code if isinstance(code, int) else EXIT_OK


def execute(options: Options) -> int:
    load_rules()  # fail once, clearly, before anything else imports them
    if options.list_rules:
        return list_rules(options.output_format)
    if options.explain is not None:
        return explain(options.explain)
    if not options.paths:
        raise UsageError("give at least one PATH (a file or a folder)")
    mode = options.mode
    check_combinations(options)
    config = read_config(options)
    baseline_file = baseline_path(options, config)
    baseline = load_baseline(baseline_file, options.write_baseline)
    html_file = html_path(options)
    # An HTML report shows each file's diff, which --check does not compute: run as --diff.
    run_mode = Mode.DIFF if html_file is not None and mode is Mode.CHECK else mode
    job = make_job(options, config, run_mode)
    discovery = find_files(options, config)
    originals = Originals()
    if mode is Mode.WRITE and (baseline_file is not None or html_file is not None):
        originals = Originals.snapshot(task.path for task in discovery.tasks)
    cache = None
    if not options.no_cache:
        cache = ResultCache(options.cache_dir or default_cache_dir(), cache_key(job))

    def run_once() -> RunResult:
        with progress_bar(options, len(discovery.tasks)) as advance:
            return run_tasks(discovery, job, options.jobs, cache, advance)

    suppressed = None
    if options.add_suppressions:
        from migrator import adopt

        result, suppressed = adopt.add_suppressions(run_once)
    else:
        result = run_once()
    baselined = None
    if baseline_file is not None and baseline is not None:
        from migrator import adopt

        try:
            baselined = adopt.apply_baseline(
                result,
                baseline,
                baseline_file,
                options.write_baseline,
                project_paths(config.root),
                originals,
                options.paths,
                job.codes,
            )
        except OSError as error:
            raise UsageError(f"cannot write baseline {baseline_file}: {error}") from None
        result = baselined.result
    exit_code = exit_code_of(result, mode)
    if suppressed is not None and suppressed.failures:
        exit_code = EXIT_ERROR
    if html_file is not None:
        from migrator import adopt, formats

        destinations = {task.path: task.destination for task in discovery.tasks if task.destination}
        page = adopt.html_page(
            result,
            mode,
            formats.rule_infos(job.codes),
            project_paths(config.root),
            options.paths,
            exit_code,
            baselined,
        )
        try:
            listed = adopt.write_html(html_file, page, run_mode, originals, destinations)
        except OSError as error:
            click.echo(f"error: cannot write the HTML report {html_file}: {error}", err=True)
            exit_code = EXIT_ERROR
        else:
            if not options.quiet:
                # stdout is a document or a patch in these cases; the text formats say it there.
                documents = ("json", "sarif", "github")
                to_stderr = mode is Mode.DIFF or options.output_format in documents
                click.echo(f"wrote {html_file} ({listed} file(s) listed)", err=to_stderr)
    if run_mode is not mode:  # the diffs were for the report only
        for outcome in result.outcomes:
            outcome.diff = None
    lists = None
    folder = csv_folder(options)
    if folder is not None:
        from migrator.formats import msfmk_csv

        try:
            lists = msfmk_csv.write_lists(folder, result, project_paths(config.root))
        except OSError as error:
            click.echo(f"error: cannot write the CSV lists into {folder}: {error}", err=True)
            exit_code = EXIT_ERROR
    extra: dict[str, Any] = {}
    if baselined is not None:
        extra["baseline"] = baselined.to_json()
    if suppressed is not None:
        extra["suppressions"] = suppressed.to_json(project_paths(config.root))
    if options.report_file is not None:
        try:
            with open(options.report_file, "w") as stream:
                report.write_json(stream, result, mode, job.codes, job.settings, exit_code, extra)
                stream.write("\n")
        except OSError as error:
            click.echo(f"error: cannot write report {options.report_file}: {error}", err=True)
            exit_code = EXIT_ERROR
    if options.output_format == "json":
        if options.show_statistics:
            found = statistics(result, rule_names())
            click.echo(json.dumps([statistic.to_json() for statistic in found], indent=2))
        else:
            report.write_json(sys.stdout, result, mode, job.codes, job.settings, exit_code, extra)
            sys.stdout.write("\n")
            sys.stdout.flush()
        for line in report.error_lines(result):
            click.echo(line, err=True)
    elif options.output_format in ("sarif", "github"):
        print_for_tools(
            result, mode, job, project_paths(config.root), exit_code, options.output_format
        )
    else:
        if suppressed is not None and not options.quiet:
            from migrator import adopt

            for line in adopt.suppression_lines(suppressed, options.verbose):
                click.echo(line)
        if options.show_statistics:
            print_statistics(result, mode, options)
        else:
            print_text(result, mode, options)
        if baselined is not None and not options.quiet:
            for line in baselined.lines():
                click.echo(line, err=mode is Mode.DIFF)
        if lists is not None and not options.quiet:
            click.echo(
                f"wrote {lists.change_list} ({lists.changes} edits) and "
                f"{lists.unsupported_api} ({lists.unsupported} unsupported-API findings)",
                err=mode is Mode.DIFF,
            )
    for failure_path, reason in suppressed.failures if suppressed is not None else ():
        click.echo(f"error: {failure_path}: {reason}", err=True)
    return exit_code


def check_combinations(options: Options) -> None:
    if options.show_statistics and options.output_format not in ("text", "json"):
        raise UsageError("--statistics prints text or JSON: use it with --format text or json")
    if options.write_baseline and options.no_baseline:
        raise UsageError("--write-baseline and --no-baseline cannot be combined")
    if options.report_dir is not None and options.output_format != "html":
        raise UsageError("--report-dir is for --format html (or write a page with --html FILE)")


def baseline_path(options: Options, config: FileConfig) -> Path | None:
    """``--baseline``, else the configuration's ``baseline`` (unless ``--no-baseline``)."""
    if options.no_baseline:
        return None
    file = options.baseline_file or config.baseline
    if file is not None and file.is_absolute() and file.is_relative_to(Path.cwd()):
        file = file.relative_to(Path.cwd())  # as the user would write it in messages
    if file is None and options.write_baseline:
        raise UsageError(
            "--write-baseline needs a file: --baseline FILE or `baseline` in [tool.npu-migrate]"
        )
    return file


def load_baseline(file: Path | None, writing: bool) -> Baseline | None:
    if file is None:
        return None
    from migrator import adopt
    from migrator.baseline import BaselineError

    try:
        return adopt.read_baseline(file, writing)
    except BaselineError as error:
        raise UsageError(str(error)) from None


def html_path(options: Options) -> Path | None:
    """Where the HTML page goes: ``--html FILE``, else ``--report-dir`` (or its default) with
    ``--format html``; ``None``: no page."""
    if options.html_file is not None:
        return options.html_file
    if options.output_format == "html":
        return (options.report_dir or HTML_REPORT_DIR) / HTML_REPORT_NAME
    return None


def print_statistics(result: RunResult, mode: Mode, options: Options) -> None:
    """``--statistics``: errors on stderr, then one line per rule code (on stderr with
    ``--diff``, whose stdout is the patch)."""
    for line in report.error_lines(result):
        click.echo(line, err=True, color=options.color)
    if mode is Mode.DIFF:
        for outcome in result.outcomes:
            if outcome.diff:
                click.echo(report.colour_diff(outcome.diff), nl=False, color=options.color)
    if options.quiet:
        return
    for line in statistic_lines(statistics(result, rule_names()), mode):
        click.echo(line, err=mode is Mode.DIFF)


def csv_folder(options: Options) -> Path | None:
    """Where msFmkTransplt's CSV lists go: ``--csv-dir``, else the current folder for
    ``--format csv``; ``None``: not written."""
    if options.csv_dir is not None:
        return options.csv_dir
    return Path(".") if options.output_format == "csv" else None


def print_for_tools(
    result: RunResult, mode: Mode, job: Job, paths: ProjectPaths, exit_code: int, kind: str
) -> None:
    """``--format sarif`` / ``github``: only the document on stdout; errors also on stderr."""
    from migrator import formats
    from migrator.formats import github, sarif

    rules = formats.rule_infos(job.codes)
    if kind == "sarif":
        log = sarif.sarif_log(result, mode, rules, job.settings, paths, exit_code)
        click.echo(json.dumps(log, indent=2))
    else:
        for line in github.annotation_lines(result, mode, rules, paths):
            click.echo(line)
    for line in report.error_lines(result):
        click.echo(line, err=True)


def read_config(options: Options) -> FileConfig:
    try:
        pyproject = options.config_file or find_pyproject(Path(p) for p in options.paths)
        return load_config(pyproject)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def make_job(options: Options, config: FileConfig, mode: Mode) -> Job:
    select = split_codes(options.select) if options.select else config.select or ()
    ignore = split_codes(options.ignore) if options.ignore else config.ignore or ()
    try:
        codes = select_codes(load_rules(), select, ignore)
    except UnknownRuleError as error:
        raise UsageError(str(error)) from None
    target = Target(options.target) if options.target else config.target or Target.NPU
    unsafe = options.unsafe_fixes if options.unsafe_fixes is not None else config.unsafe_fixes
    version = options.torch_npu_version or config.torch_npu_version
    try:
        api_tables.release_line(version)
    except api_tables.TableError as error:
        raise UsageError(f"--torch-npu-version: {error}") from None
    settings = Settings(
        target,
        bool(unsafe),
        config.rule_options,
        torch_npu_version=version,
        torch_npu_api=config.torch_npu_api,
        amp=AmpPolicy(options.amp) if options.amp else config.amp or AmpPolicy.AS_WRITTEN,
    )
    return Job(mode, codes, settings)


def find_files(options: Options, config: FileConfig) -> Discovery:
    excluder = Excluder((*config.exclude, *options.exclude), config.root)
    shell = shell_scripts(shell_patterns(options, config), config.root)
    if options.output is None:
        return discover(options.paths, excluder, shell=shell)
    output_dir = options.output.resolve()
    folders = [Path(p).resolve() for p in options.paths if os.path.isdir(p)]
    for folder in folders:
        if output_dir == folder or folder in output_dir.parents:
            raise UsageError(f"--output {options.output} is inside the input tree {folder}")
    base = (
        folders[0]
        if len(options.paths) == 1 and folders
        else common_folder(Path(p) for p in options.paths)
    )
    if output_dir == base:
        raise UsageError(f"--output {options.output} is the input folder itself")
    return discover(options.paths, excluder, output_dir, base, shell=shell)


def shell_patterns(options: Options, config: FileConfig) -> tuple[str, ...]:
    """``--include-shell`` scans every shell script; else the ``include-shell`` patterns."""
    if options.include_shell is not None:
        return DEFAULT_SHELL_PATTERNS if options.include_shell else ()
    return config.include_shell or ()


def exit_code_of(result: RunResult, mode: Mode) -> int:
    outcomes = result.outcomes
    if any(outcome.status is Status.ERROR for outcome in outcomes):
        return EXIT_ERROR
    changed = any(outcome.status is Status.CHANGED for outcome in outcomes)
    if mode is Mode.CHECK:
        manual = any(
            d.severity is Severity.MANUAL for outcome in outcomes for d in outcome.diagnostics
        )
        return EXIT_CHANGES if changed or manual else EXIT_OK
    if mode in (Mode.DIFF, Mode.WRITE):
        return EXIT_CHANGES if changed else EXIT_OK
    return EXIT_OK  # --output: the input is untouched; the copy is the product


def print_text(result: RunResult, mode: Mode, options: Options) -> None:
    color = options.color
    for line in report.error_lines(result):
        click.echo(line, err=True, color=color)
    if mode is Mode.DIFF:
        for outcome in result.outcomes:
            if outcome.diff:
                click.echo(report.colour_diff(outcome.diff), nl=False, color=color)
    if options.quiet:
        return
    # With --diff, stdout stays a clean patch: everything else goes to stderr.
    to_stderr = mode is Mode.DIFF
    for line in report.file_lines(result, mode, options.verbose) if not to_stderr else ():
        click.echo(line, color=color)
    for line in report.finding_lines(result, mode):
        click.echo(line, err=to_stderr, color=color)
    summary = report.Summary.of(result)
    if options.verbose and summary.cached:
        click.echo(f"{summary.cached} file(s) answered from the cache", err=to_stderr)
    stream = sys.stderr if to_stderr else sys.stdout
    names = rule_names()
    report.print_summary(summary, mode, names, stream, color)


def project_paths(root: Path) -> ProjectPaths:
    from migrator.formats import ProjectPaths

    return ProjectPaths.at(root)


def progress_bar(options: Options, total: int) -> Any:
    """A rich progress bar on stderr for long runs on a terminal; a no-op otherwise."""
    if options.quiet or total < PROGRESS_MIN_FILES or not sys.stderr.isatty():
        return nullcontext(None)
    return _ProgressBar(total)


class _ProgressBar:
    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("npu-migrate"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.progress.add_task("files", total=total)

    def __enter__(self) -> Any:
        self.progress.start()
        return lambda count: self.progress.advance(self.task, count)

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()


def list_rules(output_format: str) -> int:
    rules = load_rule_classes()
    if output_format == "json":
        entries = [
            {"code": r.CODE, "name": r.NAME, "summary": r.SUMMARY, "fix_safety": str(r.FIX_SAFETY)}
            for r in rules
        ]
        click.echo(json.dumps(entries, indent=2))
        return EXIT_OK
    for rule in rules:
        click.echo(f"{rule.CODE:<7} {rule.NAME:<32} {rule.FIX_SAFETY!s:<6}  {rule.SUMMARY}")
    return EXIT_OK


def explain(code: str) -> int:
    try:
        rule = rule_by_code(code)
    except UnknownRuleError as error:
        raise UsageError(f"{error}; see --list-rules") from None
    click.echo(f"{rule.CODE} ({rule.NAME}): {rule.SUMMARY}")
    click.echo(f"Fix safety: {rule.FIX_SAFETY}")
    click.echo()
    click.echo(rule.documentation())
    return EXIT_OK
