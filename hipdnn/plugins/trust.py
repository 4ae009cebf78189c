"""Which plugin files are trusted, and opening one so that the file checked is the file loaded.

A plugin is code run inside this process, so a file is trusted only when nobody but root and the
effective user could have put it where it is (rfcs/0004-plugin-loading.md section 8,
rfcs/0008-plugin-loading-trust.md):

- the file (or the plugin directory) is owned by root or the effective user and is writable by neither
  its group nor others;
- every directory passed through to reach it (the ancestors of its real path, and of each symlink
  followed) obeys the same rules, except that a group- or world-writable directory with the sticky
  bit, like ``/tmp``, is tolerated: others cannot rename or replace entries they do not own there;
- every directory holding a symlink that is followed obeys the same rules with no sticky exception:
  in a shared directory, anyone could have planted the link before its owner made it.

:func:`open_checked` applies the rules to an open descriptor, so that the loader can hand the
dynamic linker that very descriptor rather than a name that could be re-pointed after the check.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: Symlinks followed before giving up with ELOOP (Linux's own limit).
MAX_SYMLINKS = 40

# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. O_NOCTTY: a
# terminal device must not become our controlling terminal. Devices are refused before opening (by
# a stat), so these only matter if a file is swapped for one between that stat and the open.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_BINARY", 0)
)

_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
)


class FileRefused(Exception):
    """A plugin file that will not be opened or loaded; ``str()`` is the whole reason."""


def not_regular(path: str | os.PathLike[str], st: os.stat_result, real: str | None = None) -> str:
    """The reason a non-regular file (FIFO, socket, device, directory) is no plugin."""
    kind = next((name for test, name in _KINDS if test(st.st_mode)), f"of type {stat.S_IFMT(st.st_mode):#o}")
    target = f" ({real})" if real is not None and real != os.fspath(path) else ""
    return f"not a regular file: {path}{target} is {kind}; a plugin must be a shared library file"


def _writers(st: os.stat_result) -> list[str]:
    return [who for bit, who in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "other users")) if st.st_mode & bit]


def mode_problem(path: str | os.PathLike[str], st: os.stat_result, *, tolerate_sticky: bool) -> str | None:
    """Why the file or directory ``path`` (whose stat is ``st``) may not hold or lead to a plugin."""
    what = "directory" if stat.S_ISDIR(st.st_mode) else "file"
    writers = _writers(st)
    if writers and not (tolerate_sticky and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        return (
            f"{what} {path} is writable by {' and '.join(writers)} (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"a plugin is code run inside this process, so only its owner may be able to change it. "
            f"Fix: chmod go-w {path}"
        )
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        return (
            f"{what} {path} is owned by uid {st.st_uid}, neither root nor the current user (uid {euid}); "
            f"a plugin is code run inside this process. Fix: chown {euid} {path} (or install the plugin "
            "somewhere owned by root or by you)"
        )
    return None


def _link_problem(link: str, directory: str, st: os.stat_result) -> str | None:
    writers = _writers(st)
    if writers:
        return (
            f"symlink {link} is in directory {directory}, which is writable by {' and '.join(writers)} "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); whoever can write there can point the link at another "
            "library, sticky bit or not. Fix: give the library's real path, or keep the link in a directory "
            "only its owner can change"
        )
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        return (
            f"symlink {link} is in directory {directory}, owned by uid {st.st_uid}, neither root nor the "
            f"current user (uid {euid}), who can point the link at another library. Fix: give the "
            "library's real path"
        )
    return None


@dataclass(frozen=True)
class Resolved:
    """A path resolved like ``os.path.realpath``, with everything the answer depends on."""

    #: the path with every symlink resolved
    real: str
    #: every directory looked into while resolving, in order (the ancestors of ``real`` among them)
    traversed: tuple[str, ...]
    #: (symlink, directory holding it) for every symlink followed, in order
    links: tuple[tuple[str, str], ...]


def resolve(path: str | os.PathLike[str]) -> Resolved:
    """Resolve ``path`` component by component, recording the directories looked into and the
    symlinks followed (``os.path.realpath`` gives the answer but not what it depends on). A missing
    component ends resolution there; the rest is taken as written. Raises OSError (ELOOP) after
    MAX_SYMLINKS links."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        text = os.path.join(os.getcwd(), text)
    pending = text.split("/")[::-1]  # a stack: the next component is last
    current = "/"
    traversed: list[str] = []
    links: list[tuple[str, str]] = []
    missing = False
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)  # current holds no symlink, so its parent is lexical
            continue
        candidate = os.path.join(current, name)
        if missing:
            current = candidate
            continue
        if current not in traversed:
            traversed.append(current)
        try:
            st = os.lstat(candidate)
        except OSError:
            missing, current = True, candidate
            continue
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        if len(links) >= MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path))
        links.append((candidate, current))
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = "/"
        pending.extend(target.split("/")[::-1])
    return Resolved(current, tuple(traversed), tuple(links))


class TrustChecker:
    """Applies the trust rules, caching the stat of each directory for one discovery or one handle's
    loading. Disabled (everything trusted) where there are no POSIX owners (``os.geteuid`` absent)."""

    def __init__(self) -> None:
        self.enabled = hasattr(os, "geteuid")
        self._stats: dict[str, os.stat_result | str] = {}

    def _stat(self, directory: str) -> os.stat_result | str:
        if directory not in self._stats:
            try:
                self._stats[directory] = os.stat(directory)
            except OSError as exc:
                self._stats[directory] = f"cannot check directory {directory}: {exc}"
        return self._stats[directory]

    def path_problem(self, resolved: Resolved) -> str | None:
        """Why the way to ``resolved.real`` (its symlinks and the directories passed through) is not
        trusted, or None. The target itself is the caller's to check."""
        for link, directory in resolved.links:
            st = self._stat(directory)
            problem = st if isinstance(st, str) else _link_problem(link, directory, st)
            if problem is not None:
                return problem
        for directory in reversed(resolved.traversed):  # nearest first, as the fix is most likely there
            st = self._stat(directory)
            problem = st if isinstance(st, str) else mode_problem(directory, st, tolerate_sticky=True)
            if problem is not None:
                return problem
        return None

    def check(self, path: Path) -> str | None:
        """Why ``path`` (a plugin file or a directory to scan) is not trusted, or None. Looks with
        stat only; nothing is opened."""
        if not self.enabled:
            return None
        try:
            resolved = resolve(path)
            st = os.stat(resolved.real)
        except OSError as exc:
            return f"cannot check {path}: {exc}"
        return mode_problem(resolved.real, st, tolerate_sticky=False) or self.path_problem(resolved)


@dataclass(frozen=True)
class CheckedFile:
    """An open, checked plugin file: ``fd`` (the caller closes it), its resolved path and its fstat."""

    fd: int
    real: str
    st: os.stat_result

    def unchanged(self) -> bool:
        """True when ``real`` still names the file behind ``fd``."""
        try:
            now = os.stat(self.real)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (self.st.st_dev, self.st.st_ino)


def open_checked(path: Path, checker: TrustChecker) -> CheckedFile:
    """Open the plugin file ``path`` read-only and check the open descriptor: a regular file that the
    trust rules accept, still named by its resolved path once every check is done (so a swap between
    resolving and opening is caught). Raises FileRefused with the reason; never blocks."""
    resolved: Resolved | None = None
    try:
        if checker.enabled:
            resolved = resolve(path)
            real = resolved.real
        else:
            real = os.path.realpath(path)
        # A first look by name: opening a device can have side effects, even read-only.
        before = os.stat(real)
    except OSError as exc:
        raise FileRefused(f"cannot open: {exc}") from None
    if not stat.S_ISREG(before.st_mode):
        raise FileRefused(not_regular(path, before, real))
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        raise FileRefused(f"cannot open: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(not_regular(path, st, real))
        if resolved is not None:
            problem = mode_problem(real, st, tolerate_sticky=False) or checker.path_problem(resolved)
            if problem is not None:
                raise FileRefused(f"untrusted plugin file: {problem}")
        checked = CheckedFile(fd, real, st)
        if not checked.unchanged():
            raise FileRefused(
                f"{real} was replaced while it was being checked (a file, link or directory on its path "
                "changed); refused rather than load a file that was not checked"
            )
        return checked
    except BaseException:
        os.close(fd)
        raise
