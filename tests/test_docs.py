"""The documentation stays true to the repository: README.md, BENCHMARKS.md and docs/*.md.

- every relative link names a file of the repository (a clone has nothing beside it), and every
  ``#anchor`` a heading in it;
- every file named in inline code (``formation/settings.py``, ``api/test_run_reply.py::test_x``)
  exists (test paths may be given from ``tests/``), and a ``::name`` is a function or class in it;
- the shell examples use only the names ``make run`` exports, or ones they set themselves;
- the README's quick-start ``curl`` commands, run as written against ``load_demo``'s output,
  all succeed.
"""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from tests.helpers import exported

PROJECT_DIR = Path(__file__).resolve().parent.parent
DOCUMENTS = [
    PROJECT_DIR / "README.md",
    PROJECT_DIR / "BENCHMARKS.md",
    *sorted((PROJECT_DIR / "docs").glob("*.md")),
]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
# A repository file in inline code, with a known extension and maybe ::name. Test files may be
# named from tests/, and the security tests by their bare names (as docs/reliability.md does).
CODE_PATH = re.compile(r"^([\w.-]+/)*[\w-]+\.(?:py|md|sql|toml|html)(::\w+)?$")
SEARCHED = ("", "tests", "tests/security")
TEST_NAME = re.compile(r"^(fc)?::(\w+)")
FAIL_CLOSED = "security/test_fail_closed.py"
SHELL = {"sh", "bash", "shell"}
VARIABLE = re.compile(r"\$\{?([A-Za-z_]\w*)")
ASSIGNED = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=", re.MULTILINE)
ASSIGNED_AFTER_EXPORT = re.compile(r"\\\n\s+([A-Za-z_]\w*)=")


def prose(text: str) -> str:
    """The text without its fenced code blocks."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    found: set[str] = set()
    for line in prose(document.read_text()).splitlines():
        if match := re.match(r"^#{1,6} (.+)$", line):
            base = slug(match.group(1))
            name, count = base, 0
            while name in found:
                count += 1
                name = f"{base}-{count}"
            found.add(name)
    return found


def shell_blocks(document: Path) -> list[str]:
    return [code for language, code in FENCE.findall(document.read_text()) if language in SHELL]


def test_there_are_documents_to_check():
    names = {document.name for document in DOCUMENTS}
    assert {"README.md", "BENCHMARKS.md", "spec.md", "api.md", "operations.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_relative_links_and_anchors_resolve(document):
    broken = []
    for target in LINK.findall(prose(document.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        inside = linked.exists() and linked.is_relative_to(PROJECT_DIR)
        if not inside or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == []


def names_in(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", path.read_text(), re.M))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_paths_and_test_names_in_inline_code_exist(document):
    """So a moved file or a renamed test cannot leave the prose pointing at nothing."""
    missing = []
    for line in prose(document.read_text()).splitlines():
        current: Path | None = None
        for code in INLINE_CODE.findall(line):
            if CODE_PATH.match(code):
                path, _, name = code.partition("::")
                candidates = [(PROJECT_DIR / folder / path).resolve() for folder in SEARCHED]
                current = next(
                    (c for c in candidates if c.is_file() and c.is_relative_to(PROJECT_DIR)), None
                )
                if current is None:
                    missing.append(code)
                    continue
            elif match := TEST_NAME.match(code):
                fail_closed, name = match.groups()
                if fail_closed:
                    current = PROJECT_DIR / "tests" / FAIL_CLOSED
                if current is None:
                    missing.append(code)
                    continue
            else:
                continue
            if name and name not in names_in(current):
                missing.append(code)
    assert missing == []


def test_shell_examples_use_only_the_names_make_run_exports(settings, db):
    settings.DEBUG = True
    out = io.StringIO()
    call_command("load_demo", stdout=out)
    exports = set(exported(out.getvalue()))
    unknown = {}
    for document in DOCUMENTS:
        for block in shell_blocks(document):
            local = set(ASSIGNED.findall(block)) | set(ASSIGNED_AFTER_EXPORT.findall(block))
            used = set(VARIABLE.findall(block)) - local - exports
            if used:
                unknown[document.name] = sorted(used)
    assert unknown == {}


def curl_commands(document: Path) -> list[list[str]]:
    """Every ``curl`` command of the document's shell blocks, as its words."""
    commands = []
    for block in shell_blocks(document):
        for command in block.replace("\\\n", " ").splitlines():
            if command.startswith("curl "):
                commands.append(shlex.split(command, comments=True))
    return commands


def expand(word: str, values: dict[str, str]) -> str:
    return VARIABLE.sub(lambda match: values[match.group(1)], word.replace("${", "$"))


@pytest.mark.django_db
def test_the_readmes_curl_commands_succeed_as_written(settings):
    """Each quick-start curl, in order, with load_demo's exports, answers 2xx."""
    settings.DEBUG = True
    out = io.StringIO()
    call_command("load_demo", "--base-url", "http://testserver", stdout=out)
    values = exported(out.getvalue())
    commands = curl_commands(PROJECT_DIR / "README.md")
    assert len(commands) >= 5
    client = Client()
    for words in commands:
        headers: dict[str, str] = {}
        body, url, rest = None, None, iter(words[1:])
        for word in rest:
            if word == "-H":
                name, _, value = expand(next(rest), values).partition(": ")
                headers[name] = value
            elif word == "-d":
                body = expand(next(rest), values)
            elif word.startswith("-"):
                raise AssertionError(f"the test does not know curl's {word}")
            else:
                url = expand(word, values)
        assert url is not None
        assert url.startswith(values["FORMATION_URL"]), url
        path = url.removeprefix(values["FORMATION_URL"])
        if body is None:
            response = client.get(path, headers=headers)
        else:
            content_type = headers.pop("Content-Type", "application/x-www-form-urlencoded")
            response = client.post(path, body, content_type=content_type, headers=headers)
        assert 200 <= response.status_code < 300, (path, response.content)
