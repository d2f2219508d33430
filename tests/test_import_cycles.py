"""No module of the product imports itself back (docs/design.md §10): the layers contract in
pyproject.toml says which way imports go between agentops' layers; this says that no chain of
imports, inside a layer or a package either, comes back to where it started — imports made
inside functions included (grimp sees them), since a lazy import is a cycle put off, not
gone. Imports for type checking only are left out: they are never run."""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("agentops", "journal", "commerce", "sandbox")


def cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected sets of more than one module of ``package`` (Tarjan's)."""
    modules = sorted(m for m in graph.modules if m.split(".")[0] == package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        # An explicit stack would do as well; a package's depth is far below the limit.
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.split(".")[0] != package:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def build() -> grimp.ImportGraph:
    return grimp.build_graph(
        *PACKAGES, include_external_packages=False, exclude_type_checking_imports=True
    )


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return build()


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_itself_back(graph: grimp.ImportGraph, package: str) -> None:
    assert cycles(graph, package) == []


def test_a_cycle_is_found_where_there_is_one() -> None:
    """The finder itself: the graph with one import added back up the layers (the extension
    API importing the runner, which imports it) has the cycle the tree once had."""
    graph = build()
    graph.add_import(importer="agentops.effects._journal", imported="agentops.runner")
    found = cycles(graph, "agentops")
    assert len(found) == 1
    assert {"agentops.effects._journal", "agentops.runner", "agentops.kinds"} <= set(found[0])
