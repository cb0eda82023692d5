"""The CUDA extensions of a run's repository, and the operators they define. Not a rule.

NPU932 reports the Python calls of these operators; the device rules ask the same catalog
whether a branch they would make reachable on an NPU calls one (rules/device/_guards.py). The
facts are NPU932's project facts (its ``summarize`` / ``summarize_native``, stored under
:data:`KEY`): the builds of the Python files (``CUDAExtension(...)``, ``load(...)``) and the
``PYBIND11_MODULE`` / ``TORCH_LIBRARY`` definitions of the native sources.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.analysis import names
from migrator.analysis.calls import keyword, literal_value
from migrator.analysis.index import ModuleIndex, resolution_base
from migrator.analysis.project import Facts, Module, ProjectFacts

# Where NPU932 keeps its facts (its CODE: native summaries are stored by rule code).
KEY = "NPU932"
BUILDERS = {
    "torch.utils.cpp_extension.CUDAExtension": "CUDAExtension",
    "torch.utils.cpp_extension.CppExtension": "CppExtension",
    "torch.utils.cpp_extension.load": "load",
    "torch.utils.cpp_extension.load_inline": "load_inline",
}
CUDA_SUFFIXES = (".cu", ".cuh")
CUDA_KEYS = ("CUDA", "AutogradCUDA", "SparseCUDA", "QuantizedCUDA")
# The module name pybind11 gets from the build (setup.py's or load()'s name=).
BUILD_NAMED = "TORCH_EXTENSION_NAME"

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define\b(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
_PYBIND = re.compile(r"\bPYBIND11_MODULE\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_LIBRARY = re.compile(r"\bTORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_LIBRARY_IMPL = re.compile(r"\bTORCH_LIBRARY_IMPL\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
_SCHEMA_NAME = re.compile(r"(?:\w+::)?(\w+)")


# -- what the files of the run define ------------------------------------------------------------


@dataclass
class Extension:
    """One compiled module: where it is built, what it exports, whether it has CUDA code."""

    names: set[str]  # dotted names it is imported by
    built: str  # "setup.py:12"
    cuda: bool
    functions: dict[str, str] = field(default_factory=dict)  # name -> "csrc/x.cpp:40"
    known: bool = False  # functions come from a definition that was found


@dataclass
class Library:
    """A TORCH_LIBRARY namespace: its operators and those that have a CUDA kernel."""

    namespace: str
    ops: dict[str, str] = field(default_factory=dict)  # name -> "csrc/ops.cpp:10"
    cuda: set[str] = field(default_factory=set)


@dataclass
class Catalog:
    extensions: list[Extension]
    libraries: dict[str, Library]
    words: tuple[str, ...]
    local: dict[str, dict[str, Extension]]  # path -> variable bound to load(...) -> extension

    @classmethod
    def of(cls, project: ProjectFacts) -> Catalog:
        """The catalog of a run's facts, built once per process and run."""
        key = project.digest if project else ""
        memo = _CATALOGS.get(key)
        if memo is None:
            memo = _CATALOGS[key] = _catalog(project)
        return memo

    def lookup(self, name: str, path: str, project: ProjectFacts) -> str | None:
        """The message for a call of ``name`` (qualified) from the file ``path``, or None."""
        found = self.kernel(name, path, project)
        if found is None:
            return None
        if found.library:
            return (
                f"`{found.operator}` is a custom operator with a CUDA kernel (registered in "
                f"{found.defined}): CUDA kernels do not run on Ascend; use a torch_npu or PyTorch "
                "operation, or port the kernel to an Ascend C custom operator"
            )
        where = f"defined in {found.defined}, " if found.defined else ""
        return (
            f"`{found.operator}` is an operator of the CUDA extension `{found.module}` ({where}"
            f"built in {found.built}): CUDA kernels do not run on Ascend; use a torch_npu or "
            "PyTorch operation, or port the kernel to an Ascend C custom operator"
        )

    def kernel(self, name: str, path: str, project: ProjectFacts) -> Kernel | None:
        """The repository's CUDA operator that a call of ``name`` (qualified) from the file
        ``path`` runs, or None."""
        absolute = project.absolute(name, path) or name
        parts = absolute.split(".")
        if len(parts) >= 4 and parts[:2] == ["torch", "ops"]:
            library = self.libraries.get(parts[2])
            if library is not None and parts[3] in library.cuda:
                operator = f"torch.ops.{parts[2]}.{parts[3]}"
                return Kernel(operator, parts[2], library.ops[parts[3]], "", library=True)
            return None
        for extension in self.extensions:
            for module in extension.names:
                if not absolute.startswith(module + "."):
                    continue
                function = absolute[len(module) + 1 :].split(".")[0]
                if extension.known and function not in extension.functions:
                    return None
                defined = extension.functions.get(function, "")
                return Kernel(function, module, defined, extension.built)
        return None


@dataclass(frozen=True)
class Kernel:
    """A CUDA operator of the repository: a function of a compiled extension module, or an
    operator of a ``TORCH_LIBRARY`` namespace (``library``)."""

    operator: str
    module: str  # the extension module, or the library's namespace
    defined: str  # "csrc/vision.cpp:18" ("" when the definition was not found)
    built: str  # "setup.py:47"
    library: bool = False


_CATALOGS: dict[str, Catalog] = {}


def _catalog(project: ProjectFacts) -> Catalog:
    natives = project.native_summaries(KEY)
    extensions: list[Extension] = []
    local: dict[str, dict[str, Extension]] = {}
    claimed: set[str] = set()
    for path, facts in project.summaries(KEY).items():
        module = project.module_at(path)
        for build in facts.get("builds", []):
            extension, sources = _extension(build, path, module, natives)
            claimed.update(sources)
            extensions.append(extension)
            if build.get("bound"):
                local.setdefault(path, {})[build["bound"]] = extension
    extensions.extend(_unbuilt_modules(natives, claimed))
    libraries = _libraries(natives)
    words = {name.rsplit(".", 1)[-1] for e in extensions if e.cuda for name in e.names}
    words.update(variable for bound in local.values() for variable in bound)
    words.update(namespace for namespace, library in libraries.items() if library.cuda)
    cuda_extensions = [e for e in extensions if e.cuda]
    return Catalog(cuda_extensions, libraries, tuple(sorted(words)), local)


def _extension(
    build: Mapping[str, Any], path: str, module: Module | None, natives: Mapping[str, Facts]
) -> tuple[Extension, list[str]]:
    folder = os.path.dirname(os.path.abspath(path))
    sources = _sources_of(build.get("sources"), folder, natives)
    names = set()
    if build.get("name"):
        names.add(build["name"])
    if build.get("bound") and build.get("module_level") and module is not None:
        names.add(f"{module.name}.{build['bound']}")
    cuda = bool(build.get("cuda")) or any(natives[s].get("kernels") for s in sources)
    extension = Extension(names, f"{_shown(path)}:{build['line']}", cuda)
    for source in sources:
        for exported in natives[source].get("modules", []):
            if exported["name"] in (BUILD_NAMED, *(n.rsplit(".", 1)[-1] for n in names)):
                extension.known = True
                for function in exported["functions"]:
                    extension.functions[function] = (
                        f"{_shown(source)}:{exported['functions'][function]}"
                    )
    return extension, sources


def _sources_of(listed: Any, folder: str, natives: Mapping[str, Facts]) -> list[str]:
    """The native sources a build compiles: those of its literal ``sources=`` list, else every
    scanned source under the build script's folder (a computed list, e.g. a glob)."""
    by_real = {os.path.abspath(path): path for path in natives}
    if isinstance(listed, list):
        wanted = {os.path.abspath(os.path.join(folder, item)) for item in listed}
        return sorted(by_real[real] for real in wanted if real in by_real)
    inside = folder.rstrip(os.sep) + os.sep
    return sorted(path for real, path in by_real.items() if real.startswith(inside))


def _unbuilt_modules(natives: Mapping[str, Facts], claimed: set[str]) -> Iterator[Extension]:
    """Modules whose C++ names them literally (``PYBIND11_MODULE(fused_ops, m)``) and that no
    scanned Python build compiles (CMake, a build outside the run): CUDA when their folder
    holds CUDA sources."""
    cuda_folders = {os.path.dirname(p) for p, facts in natives.items() if facts.get("kernels")}
    for path, facts in natives.items():
        if path in claimed:
            continue
        for exported in facts.get("modules", []):
            if exported["name"] == BUILD_NAMED:
                continue
            functions = {
                name: f"{_shown(path)}:{line}" for name, line in exported["functions"].items()
            }
            cuda = os.path.dirname(path) in cuda_folders
            yield Extension(
                {exported["name"]}, f"{_shown(path)}:{exported['line']}", cuda, functions, True
            )


def _libraries(natives: Mapping[str, Facts]) -> dict[str, Library]:
    libraries: dict[str, Library] = {}
    for path, facts in natives.items():
        # An operator defined with its kernel in a CUDA file, or implemented for the CUDA
        # dispatch key, has a CUDA kernel; a schema alone says nothing about its kernels.
        kernels = path.endswith(CUDA_SUFFIXES) or bool(facts.get("kernels"))
        for defined in facts.get("libraries", []):
            library = libraries.setdefault(defined["namespace"], Library(defined["namespace"]))
            for op, line in defined["ops"].items():
                library.ops.setdefault(op, f"{_shown(path)}:{line}")
                if kernels:
                    library.cuda.add(op)
        for impl in facts.get("impls", []):
            library = libraries.setdefault(impl["namespace"], Library(impl["namespace"]))
            for op, line in impl["ops"].items():
                library.ops.setdefault(op, f"{_shown(path)}:{line}")
                if impl["key"] in CUDA_KEYS or kernels:
                    library.cuda.add(op)
    return libraries


def local_module_call(call: ast.Call, catalog: Catalog, path: str) -> str | None:
    """``fused.forward(x)`` where ``fused = load(...)`` in this file: its dotted name under the
    extension's first name (a local variable has no qualified name of its own)."""
    bound = catalog.local.get(path)
    func = call.func
    if not bound or not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return None
    extension = bound.get(func.value.id)
    if extension is None or not extension.cuda or not extension.names:
        return None
    return f"{sorted(extension.names)[0]}.{func.attr}"


# -- scanning ------------------------------------------------------------------------------------


def builds(index: ModuleIndex) -> Iterator[dict[str, Any]]:
    """Every ``CUDAExtension`` / ``CppExtension`` / ``load`` / ``load_inline`` call of the file."""
    reaching = index.names_reaching(frozenset({"torch"}))
    for call in index.nodes(ast.Call):
        if not isinstance(call.func, ast.Name | ast.Attribute):
            continue
        base = resolution_base(call.func)
        if base is None or base.id not in reaching:
            continue
        kind = _builder_kind(names.resolve(index, call.func))
        if kind is None:
            continue
        yield _build(index, call, kind)


def _builder_kind(qualified: str | names.Ambiguous | None) -> str | None:
    """The kind of build a callee makes. A builder chosen at run time among torch's builders
    (maskrcnn-benchmark's ``extension = CppExtension`` / ``extension = CUDAExtension`` when CUDA
    is there) builds the CUDA extension where it matters: on a machine with CUDA."""
    if isinstance(qualified, str):
        return BUILDERS.get(qualified)
    if isinstance(qualified, names.Ambiguous):
        kinds = [BUILDERS.get(candidate) for candidate in qualified.candidates]
        if kinds and all(kinds) and "CUDAExtension" in kinds:
            return "CUDAExtension"
    return None


def _build(index: ModuleIndex, call: ast.Call, kind: str) -> dict[str, Any]:
    name = keyword(call, "name")
    name_value = literal_value(name.value if name else call.args[0]) if name or call.args else None
    sources = keyword(call, "sources")
    sources_node = sources.value if sources else (call.args[1] if len(call.args) > 1 else None)
    listed = literal_value(sources_node) if sources_node is not None else None
    with_cuda = keyword(call, "with_cuda")
    cuda = (
        kind == "CUDAExtension"
        or keyword(call, "cuda_sources") is not None
        or (with_cuda is not None and literal_value(with_cuda.value) is True)
        or (
            isinstance(listed, list | tuple) and any(str(s).endswith(CUDA_SUFFIXES) for s in listed)
        )
    )
    build: dict[str, Any] = {
        "kind": kind,
        "line": call.lineno,
        "name": name_value if isinstance(name_value, str) else None,
        "sources": [str(s) for s in listed] if isinstance(listed, list | tuple) else None,
        "cuda": cuda,
    }
    statement = index.parent(call)
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, ast.Name) and kind in ("load", "load_inline"):
            build["bound"] = target.id
            build["module_level"] = isinstance(index.parent(statement), ast.Module)
    return build


def scan_native(text: str) -> Facts | None:
    """``PYBIND11_MODULE`` exports and ``TORCH_LIBRARY`` operators, with their lines."""
    code = _DEFINE.sub(_blank, _COMMENT.sub(_blank, text))  # same length, same lines
    modules = [
        {"name": match[1], "line": _line(code, match.start()), "functions": functions}
        for match in _PYBIND.finditer(code)
        for functions in [_registered(code, match, "def", plain=True)]
    ]
    libraries = [
        {"namespace": match[1], "line": _line(code, match.start()), "ops": ops}
        for match in _LIBRARY.finditer(code)
        for ops in [_registered(code, match, "def")]
    ]
    impls = [
        {"namespace": match[1], "key": match[2], "ops": _registered(code, match, "impl")}
        for match in _LIBRARY_IMPL.finditer(code)
    ]
    kernels = "__global__" in code
    if not (modules or libraries or impls or kernels):
        return None
    return {"modules": modules, "libraries": libraries, "impls": impls, "kernels": kernels}


def _registered(
    code: str, macro: re.Match[str], method: str, plain: bool = False
) -> dict[str, int]:
    """Names registered by ``<var>.def("name", ...)`` (or ``.impl``) in the macro's body."""
    variable = macro.group(macro.lastindex or 0)
    body_start = code.find("{", macro.end())
    if body_start < 0:
        return {}
    body_end = _closing(code, body_start)
    body = code[body_start:body_end]
    pattern = re.compile(
        rf"\b{re.escape(variable)}\s*\.\s*{method}\s*\(\s*"
        r'(?:TORCH_SELECTIVE_(?:SCHEMA|NAME)\s*\(\s*)?"([^"]+)"'
    )
    found: dict[str, int] = {}
    for match in pattern.finditer(body):
        schema = match[1]
        name = schema if plain else _SCHEMA_NAME.match(schema.strip())
        label = name if isinstance(name, str) else (name[1] if name else None)
        if label:
            found.setdefault(label, _line(code, body_start + match.start()))
    return found


def _closing(code: str, start: int) -> int:
    depth = 0
    for position in range(start, len(code)):
        character = code[position]
        if character == "{":
            depth += 1
        elif character == "}":
            depth -= 1
            if depth == 0:
                return position
    return len(code)


def _shown(path: str) -> str:
    """A path as messages show it (``./csrc/x.cpp`` -> ``csrc/x.cpp``)."""
    return os.path.normpath(path)


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match[0])


def _line(code: str, offset: int) -> int:
    return code.count("\n", 0, offset) + 1
