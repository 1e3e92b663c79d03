"""Every file a DeviceKit command writes, and how a long command stops.

Files. :func:`write_files` is the one way a command writes its outputs: each
file goes to a temporary name in its target folder, is flushed and fsynced,
and only when every file of the set is complete are they renamed over their
targets (with SIGINT/SIGTERM held back for those few renames) and the folders
fsynced. A full disk, a missing permission or an interrupt before that point
removes the temporaries and leaves the previous files exactly as they were;
after it, the new set is complete. So a report set (report.json, junit.xml,
report.html) appears whole, never mixed with an older run's files. The one
window left is a SIGKILL or a power cut between two of the renames (a few
system calls); the files of one set carry the same run id where their format
has room for it, so a mixed set can still be told apart.

:func:`output_problem` checks an output location before any work starts
(commands exit with :data:`EXIT_OUTPUT` and its one line).

Signals. :func:`signal_policy` (a context ``devicekit``'s ``main`` runs every
command in) makes SIGTERM behave as Ctrl-C does (a
``KeyboardInterrupt`` in the main thread, so the same code stops the workers
and writes the partial report), and :func:`interrupt_exit_code` gives the
conventional code of the signal that stopped the run (130 SIGINT, 143
SIGTERM). :func:`pipe_safe_stdout` makes a closed stdout (``devicekit ... |
head``) a non-event: output is dropped, the command finishes its work and
writes its files.
"""

import contextlib
import os
import signal
import sys
import tempfile
import threading

from ..errors import DeviceKitError

EXIT_OUTPUT = 3  # an output location that cannot take the files (checked first)
# The last lines of every long command's exit-code help (argparse epilog).
INTERRUPT_CODES_HELP = """\
  130  stopped by Ctrl-C (SIGINT)
  143  stopped by SIGTERM (both: one line, no traceback; an output file is
       written whole or not at all)
"""
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class OutputError(DeviceKitError, OSError):
    """An output file could not be written; the message is one line naming the
    path and the system's reason. The previous file at that path is intact."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: cannot write: {reason}; nothing was replaced (files "
                         f"from before, if any, are as they were)")
        self.path = path


def output_problem(path, option, folder=False):
    """Why ``path`` cannot be written (one line starting with ``option``), or None.

    ``folder``: ``path`` is a folder that will hold the files (it may not exist
    yet: its first existing ancestor must be a writable folder); otherwise a
    file (its folder must exist or be creatable, and an existing ``path`` must
    not be a folder)."""
    path_abs = os.path.abspath(path)
    if folder and os.path.exists(path_abs) and not os.path.isdir(path_abs):
        return f"{option} {path}: exists and is not a folder"
    if not folder and os.path.isdir(path_abs):
        return f"{option} {path}: is a folder, not a file"
    probe = path_abs if folder else os.path.dirname(path_abs)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{option} {path}: {probe} is not a folder"
    try:  # a real write, not os.access: root passes access() on a read-only mount
        fd, tmp = tempfile.mkstemp(prefix=".devicekit-probe-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        return f"{option} {path}: {probe} is not writable ({e.strerror or e})"
    return None


@contextlib.contextmanager
def held_signals(redeliver=True):
    """SIGINT/SIGTERM that arrive inside the block take effect after it
    (``redeliver``), or never (``redeliver=False``: a stop already under way).

    Python runs signal handlers in the main thread only, whichever thread the
    system delivered the signal to; so the handlers are swapped for ones that
    just note the signal (a per-thread signal mask would not do: with other
    threads alive the signal reaches one of them and the main thread still
    runs the handler). Outside the main thread no handler can interrupt this
    code, and the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending, old = [], {}

    def note(signum, frame):
        pending.append(signum)

    try:
        for s in _STOP_SIGNALS:
            handler = signal.getsignal(s)
            if handler is not None:  # None: set outside Python, cannot be put back
                old[s] = handler
                signal.signal(s, note)
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if redeliver and pending:
            signal.raise_signal(pending[0])  # the restored handler runs now


def _fsync_folder(folder):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a folder; the renames still hold
        pass
    finally:
        os.close(fd)


def _mode():
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask  # mkstemp makes the file private; an output is not


def write_files(files):
    """Writes ``{path: text or bytes}`` as one set: all of them or none of them.

    Raises :class:`OutputError` (nothing replaced) when any file cannot be
    written; a KeyboardInterrupt before the renames also replaces nothing."""
    for path in files:  # the one way a rename fails midway: check it before any is made
        if os.path.isdir(path):
            raise OutputError(path, "it is a folder")
    temps = {}
    try:
        for path, content in files.items():
            folder = os.path.dirname(os.path.abspath(path))
            try:
                os.makedirs(folder, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                                           suffix=".tmp", dir=folder)
            except OSError as e:
                raise OutputError(path, e.strerror or e) from None
            temps[path] = tmp
            data = content.encode("utf-8") if isinstance(content, str) else content
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, _mode())
            except OSError as e:
                raise OutputError(path, e.strerror or e) from None
        with held_signals():
            for path, tmp in temps.items():
                try:
                    os.replace(tmp, path)
                except OSError as e:
                    raise OutputError(path, e.strerror or e) from None
            temps.clear()
            for folder in {os.path.dirname(os.path.abspath(p)) for p in files}:
                _fsync_folder(folder)
    finally:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return list(files)


def write_file(path, content):
    """One file, atomically (see :func:`write_files`)."""
    write_files({path: content})
    return path


# -- signals ---------------------------------------------------------------

_received = []


def _on_sigterm(signum, frame):
    _received.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def signal_policy():
    """Inside the block SIGTERM raises KeyboardInterrupt in the main thread, as
    SIGINT does; the previous handler comes back after it. A no-op outside the
    main thread or when SIGTERM already has a handler of someone else's."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        yield
        return
    del _received[:]
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def interrupt_exit_code():
    """128 + the signal that stopped the run: 143 after SIGTERM, else 130 (SIGINT)."""
    return 128 + (_received[-1] if _received else signal.SIGINT)


def interrupt_name():
    return "SIGTERM" if _received and _received[-1] == signal.SIGTERM else "Ctrl-C (SIGINT)"


class _PipeSafe:
    """A text stream that drops its output once the reader has gone."""

    def __init__(self, stream):
        self._stream, self._closed = stream, False

    def _redirect(self):
        self._closed = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text):
        if self._closed:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._redirect()
            return len(text)

    def flush(self):
        if self._closed:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._redirect()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def pipe_safe_stdout():
    """Inside the block ``sys.stdout`` drops its output once the reader has
    gone instead of raising BrokenPipeError: a closed stdout is not an error."""
    before = sys.stdout
    if before is None or isinstance(before, _PipeSafe):
        yield
        return
    sys.stdout = _PipeSafe(before)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _PipeSafe):
            sys.stdout.flush()  # what is still buffered meets a gone reader here, not at exit
            sys.stdout = before
