# The Python runner: runs inside the sandbox as
# `python3 -I -X utf8 runner.py [--check] <entry file>`, loads the algorithm once, then answers
# calls one at a time over the control channel on fd 3 (docs/runtime-protocol.md). Standard
# library only: it runs on the system python with nothing of the server's installed.
#
# Start-up time matters (every cold worker pays it, and a cold worker is started for a call
# that waits for it), so only cheap modules are imported up front: the channel is used through
# plain read(2)/write(2) (fd 3 is a Unix socket, but the `socket` module costs more to import
# than the runner needs); `json` only for what needs it (a call's header and a text or binary
# answer's are read and written by hand), the SDK when the algorithm imports it, and `inspect`,
# `traceback` and `asyncio` only when something needs them.
import os
import sys

CHANNEL_FD = 3
MODULE_NAME = '__algorithm__'
KNOWN_TYPES = ('text', 'json', 'binary')
INPUT_MISMATCH = 'apply() functions do not match input data'

json = None  # imported lazily, see _json()
_RUNNER_FILE = sys._getframe().f_code.co_filename


def _json():
    global json
    if json is None:
        import json as j
        json = j
    return json


# ---------------------------------------------------------------------------------------------
# The channel.


class Channel:
    def __init__(self, fd):
        self.fd = fd
        os.set_blocking(fd, True)
        # Programs the algorithm starts (os.system, say) do not get the channel.
        os.set_inheritable(fd, False)

    def read_exactly(self, n):
        """n bytes, or None at end of stream (the server closed the channel)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = os.readv(self.fd, [view[got:]])
            if k == 0:
                return None
            got += k
        view.release()
        return buf

    def read_frame(self):
        """(header, body), or None once the server has closed the channel."""
        prefix = self.read_exactly(8)
        if prefix is None:
            return None
        header = self.read_exactly(int.from_bytes(prefix[0:4], 'little'))
        body = self.read_exactly(int.from_bytes(prefix[4:8], 'little')) if header is not None else None
        if body is None:
            return None
        return _call_header(header) or _json().loads(header.decode('utf-8')), body

    def send(self, header, body=b''):
        """One frame; `header` is a dict, or JSON bytes made by hand."""
        h = header if isinstance(header, bytes) else _json().dumps(header, separators=(',', ':')).encode('utf-8')
        n = body.nbytes if isinstance(body, memoryview) else len(body)
        prefix = len(h).to_bytes(4, 'little') + n.to_bytes(4, 'little')
        if n <= 64 * 1024:
            self._write_all(memoryview(prefix + h + bytes(body)))
        else:
            self._write_all(memoryview(prefix + h))
            self._write_all(memoryview(body))

    def _write_all(self, view):
        while len(view):
            view = view[os.write(self.fd, view):]


_CALL_PREFIX = b'{"type":"call","id":'
_CALL_TYPES = {b'text': 'text', b'json': 'json', b'binary': 'binary'}


def _call_header(raw):
    """The header of a call as the server writes it, `{"type":"call","id":N,"content_type":"T"}`
    (with `,"traceparent":"…"` before the brace when the call has one), read without json; None
    for anything else (then json reads it)."""
    if not raw.startswith(_CALL_PREFIX) or not raw.endswith(b'"}'):
        return None
    digits, sep, rest = bytes(raw[len(_CALL_PREFIX):-2]).partition(b',"content_type":"')
    rest, traced, trace = rest.partition(b'","traceparent":"')
    content_type = _CALL_TYPES.get(rest)
    if not sep or content_type is None or not digits.isdigit():
        return None
    if traced:
        if len(trace) != 55 or trace.strip(b'0123456789abcdef-'):
            return None
        return {'type': 'call', 'id': int(digits), 'content_type': content_type, 'traceparent': trace.decode('ascii')}
    return {'type': 'call', 'id': int(digits), 'content_type': content_type}


# ---------------------------------------------------------------------------------------------
# Errors.


def _format_exception(exc):
    """The traceback text, starting at the algorithm's code: the runner's own frames (and the
    import machinery's, for errors while loading) above it are left out."""
    import traceback
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == _RUNNER_FILE or tb.tb_frame.f_code.co_filename.startswith('<frozen importlib')):
        tb = tb.tb_next
    return ''.join(traceback.format_exception(type(exc), exc, tb))


def _release_frames(exc):
    """Drop the locals of the frames an exception went through (after a MemoryError, they hold
    what filled the memory; the line numbers stay in the traceback)."""
    tb = exc.__traceback__
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # a frame still running (the runner's own)
            pass
        tb = tb.tb_next


def describe(exc, fallback_type):
    if isinstance(exc, MemoryError):
        _release_frames(exc)
        error_type = 'OutOfMemoryError'
        message = str(exc) or 'out of memory'
    elif isinstance(exc, SystemExit):
        error_type = 'SystemExit'
        message = f'the algorithm called sys.exit({exc.code!r})'
    else:
        try:
            declared = getattr(exc, 'error_type', None)
        except Exception:  # a property that fails
            declared = None
        error_type = declared if isinstance(declared, str) else fallback_type
        try:
            message = str(exc)
        except Exception:  # a __str__ that fails
            message = ''
        message = message or type(exc).__name__
    try:
        stacktrace = _format_exception(exc)
    except Exception:
        stacktrace = ''
    return {'message': message, 'stacktrace': stacktrace, 'error_type': error_type}


_TYPE_NAMES = {'text': 'text (Content-Type: text/plain)', 'json': 'JSON (Content-Type: application/json)', 'binary': 'binary (Content-Type: application/octet-stream)'}
_JSON_KINDS = {ord('['): 'a JSON array', ord('{'): 'a JSON object', ord('"'): 'a JSON string', ord('t'): 'a JSON boolean', ord('f'): 'a JSON boolean', ord('n'): 'JSON null'}


def received(content_type, body):
    """What a call's input is, in words, from its first bytes (JSON is not parsed for this)."""
    if content_type == 'json':
        first = next((b for b in bytes(body[:64]) if b not in b' \t\r\n'), None)
        return _JSON_KINDS.get(first, 'a JSON number') if first is not None else 'empty JSON'
    return 'text' if content_type == 'text' else 'binary data'


def mismatch(content_type, body, algo):
    """The original's InputError message, then what was sent and what the entry point takes."""
    got = received(content_type, body)
    if not algo.takes_one_arg:
        return f'{INPUT_MISMATCH}: the input is {got}, but apply() must take exactly one argument, the input'
    accepts = ', '.join(_TYPE_NAMES[t] for t in ('text', 'json', 'binary') if t in algo.input_types)
    return f'{INPUT_MISMATCH}: the input is {got}; this algorithm accepts {accepts} (its input_types)'


def input_error(message=INPUT_MISMATCH, stacktrace=''):
    return {'message': message, 'stacktrace': stacktrace, 'error_type': 'InputError'}


# ---------------------------------------------------------------------------------------------
# Loading.


class Algorithm:
    apply = None
    load = None
    input_types = None  # a set, or None for all
    takes_one_arg = True
    load_error = None


def _search_path(entry):
    """The entry's directory, then the dependencies the build installed (pip --target) in
    `<algo root>/.algohost/python`; the algo root is the directory above `src/` for
    `src/X.py`, else the entry's directory."""
    entry_dir = os.path.dirname(os.path.abspath(entry))
    root = os.path.dirname(entry_dir) if os.path.basename(entry_dir) == 'src' else entry_dir
    deps = os.path.join(root, '.algohost', 'python')
    paths = [entry_dir]
    if os.path.isdir(deps):
        paths.append(deps)
    return paths, deps


def _import_entry(entry):
    paths, deps = _search_path(entry)
    sys.path[0:0] = paths
    if len(paths) > 1:
        try:
            if any(name.endswith('.pth') for name in os.listdir(deps)):
                import site  # already imported at start-up; processes the .pth files
                site.addsitedir(deps)
        except OSError:
            pass
    sys.argv[:] = [entry]
    # What importlib.util.spec_from_file_location and module_from_spec do, without the
    # milliseconds importlib.util takes to import.
    from importlib.machinery import ModuleSpec, SourceFileLoader
    path = os.path.abspath(entry)
    loader = SourceFileLoader(MODULE_NAME, path)
    spec = ModuleSpec(MODULE_NAME, loader, origin=path)
    spec.has_location = True
    module = type(sys)(MODULE_NAME)
    module.__spec__, module.__loader__, module.__file__, module.__cached__ = spec, loader, path, spec.cached
    sys.modules[MODULE_NAME] = module  # pickle, dataclasses and friends look modules up here
    try:
        loader.exec_module(module)
    except BaseException:
        sys.modules.pop(MODULE_NAME, None)
        raise

    algo = Algorithm()
    apply = getattr(module, 'apply', None)
    if apply is None:
        raise AttributeError(f'{os.path.basename(entry)} defines no apply function')
    if not callable(apply):
        raise TypeError(f'apply in {os.path.basename(entry)} is not callable ({type(apply).__name__})')
    algo.apply = apply
    load = getattr(module, 'load', None)
    algo.load = load if callable(load) else None

    declared = getattr(module, 'INPUT_TYPES', None)
    if declared is None:
        declared = getattr(module, 'input_types', None)
    if declared is not None:
        if isinstance(declared, str) or not isinstance(declared, (list, tuple, set, frozenset)) or any(t not in KNOWN_TYPES for t in declared):
            raise TypeError('INPUT_TYPES must be a list of ' + ', '.join(f'"{t}"' for t in KNOWN_TYPES))
        algo.input_types = frozenset(declared)
    algo.takes_one_arg = _takes_one_arg(apply)
    return algo


class _C:
    def m(self):
        pass


_FunctionType = type(_json)
_MethodType = type(_C().m)


def _takes_one_arg(fn):
    """Whether apply(input) binds: what inspect.signature(fn).bind(input) says, answered from
    the code object for plain functions (inspect costs milliseconds to import)."""
    target, bound = fn, 0
    if type(fn) is _MethodType:
        target, bound = fn.__func__, 1
    if type(target) is _FunctionType and not hasattr(target, '__signature__') and not hasattr(target, '__wrapped__'):
        code = target.__code__
        positional = code.co_argcount - bound
        defaults = len(target.__defaults__ or ())
        required = code.co_argcount - defaults - bound
        has_varargs = bool(code.co_flags & 0x04)
        kw_defaults = target.__kwdefaults__ or {}
        kw_required = [n for n in code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount] if n not in kw_defaults]
        return (positional >= 1 or has_varargs) and required <= 1 and not kw_required
    import inspect
    try:
        inspect.signature(fn).bind(None)
        return True
    except TypeError:
        return False
    except ValueError:  # no signature to be had (some builtins): let the call decide
        return True


def load_algorithm(entry):
    algo = Algorithm()
    try:
        algo = _import_entry(entry)
        if algo.load is not None:
            _run(algo.load)
    except BaseException as exc:
        algo = Algorithm()
        algo.load_error = describe(exc, 'LoadingError')
        algo.load_error['error_type'] = 'LoadingError'
    finally:
        _flush_output()
    return algo


# ---------------------------------------------------------------------------------------------
# Calls.


def decode_input(content_type, body):
    if content_type == 'json':
        return _json().loads(body.decode('utf-8'))
    if content_type == 'text':
        return body.decode('utf-8')
    return bytes(body)


class ResultError(Exception):
    error_type = 'AlgorithmError'


def encode_result(result):
    """bytes-like → binary, str → text, None → void, anything else → JSON."""
    if result is None:
        return 'void', b''
    if isinstance(result, (bytes, bytearray)):
        return 'binary', result
    if isinstance(result, memoryview):
        return 'binary', result.cast('B') if result.c_contiguous else result.tobytes()
    if isinstance(result, str):
        try:
            return 'text', result.encode('utf-8')
        except UnicodeEncodeError as exc:
            raise ResultError(f'the result is not valid Unicode text: {exc}') from None
    try:
        text = _json().dumps(result, allow_nan=False, ensure_ascii=False, separators=(',', ':'))
        return 'json', text.encode('utf-8')
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise ResultError(f'the result cannot be turned into JSON ({type(result).__name__}): {exc}') from None


def _flush_output():
    """What the algorithm printed reaches the server's stdout pipe before the answer does."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            pass


def _run(fn, *args):
    """fn(*args), run to completion when it is an `async def`."""
    result = fn(*args)
    if type(result).__name__ == 'coroutine' and hasattr(result, '__await__'):
        import asyncio
        result = asyncio.run(result)
    return result


class _CountingStdout:
    """fd 1 as a raw stream that counts what passes: the server waits for that many bytes of
    stdout before it cuts a call's output off (stdout and the channel are separate pipes)."""

    def __init__(self):
        self.count = 0

    def install(self):
        import io
        counter = self

        class Raw(io.RawIOBase):
            def writable(self):
                return True

            def write(self, b):
                n = os.write(1, b)
                counter.count += n
                return n

            def fileno(self):
                return 1

        sys.stdout = io.TextIOWrapper(io.BufferedWriter(Raw()), encoding='utf-8', errors='backslashreplace', line_buffering=True)


_stdout = _CountingStdout()


# The SDK's transport: algohost.py takes it from here when it is imported after start-up.
_algohost_request = None
# The traceparent of the call in progress, as its `call` frame gave it (sent with SDK requests).
_traceparent = [None]


def _install_sdk(channel):
    """`import algohost` (and `import Algorithmia`) reach the platform through the channel. The
    SDK is not imported for that: a module that imported it while loading gets the transport
    now, one imported later takes it from this module (__main__) as it is imported."""
    global _algohost_request
    next_rid = [0]

    def request(method, url, headers, body):
        # The call's trace (docs/traces.md): the server's span for the request is the run's child.
        if _traceparent[0] is not None:
            headers = dict(headers, traceparent=_traceparent[0])
        next_rid[0] += 1
        rid = next_rid[0]
        channel.send({'type': 'request', 'rid': rid, 'method': method, 'url': url, 'headers': headers}, body)
        while True:
            frame = channel.read_frame()
            if frame is None:
                raise SystemExit(0)  # the server went away mid-call
            h, b = frame
            if h.get('type') == 'response' and h.get('rid') == rid:
                return h.get('status', 0), h.get('headers') or {}, bytes(b), h.get('error')

    _algohost_request = request
    sdk = sys.modules.get('algohost')
    if sdk is not None:
        sdk._request = request


def handle_call(channel, algo, header, body, perf_counter):
    call_id = header.get('id')
    _stdout.count = 0
    trace = header.get('traceparent')
    _traceparent[0] = trace if type(trace) is str else None

    def fail(error, duration_ms=0):
        _flush_output()
        channel.send({'type': 'error', 'id': call_id, 'duration_ms': duration_ms, 'error': error, 'stdout_bytes': _stdout.count})

    if algo.load_error is not None:
        return fail(algo.load_error)
    content_type = header.get('content_type')
    if content_type not in KNOWN_TYPES:
        return fail(input_error(f'unknown content type {content_type!r}'))
    if (algo.input_types is not None and content_type not in algo.input_types) or not algo.takes_one_arg:
        return fail(input_error(mismatch(content_type, body, algo)))
    try:
        value = decode_input(content_type, body)
    except Exception as exc:
        return fail(input_error(f'the input is not valid {content_type}: {exc}'))
    del body

    started = perf_counter()
    try:
        result = _run(algo.apply, value)
        duration_ms = (perf_counter() - started) * 1000
        del value
        out_type, out = encode_result(result)
        del result
    except BaseException as exc:  # everything the algorithm does, SystemExit included
        duration_ms = (perf_counter() - started) * 1000
        value = result = None
        return fail(describe(exc, 'AlgorithmError'), duration_ms)
    _flush_output()
    if type(call_id) is int:
        # What json.dumps would write (repr of a float is JSON for finite values).
        header = b'{"type":"result","id":%d,"content_type":"%s","duration_ms":%s,"stdout_bytes":%d}' % (call_id, out_type.encode(), repr(duration_ms).encode(), _stdout.count)
    else:
        header = {'type': 'result', 'id': call_id, 'content_type': out_type, 'duration_ms': duration_ms, 'stdout_bytes': _stdout.count}
    channel.send(header, out)


def _sdk_importable():
    # After the algorithm's own directories: a module of its own named algohost wins.
    sys.path.append(os.path.dirname(_RUNNER_FILE))


def serve_spare(root):
    """`--spare <root>`: a runner started before its build is known (docs/runtime-protocol.md,
    "Pre-started workers"). It says so; the server puts the build's files in `root` (its /algo,
    read-only in here) and sends one `load` frame naming the entry file, which it then loads and
    serves as a runner started for the build would."""
    channel = Channel(CHANNEL_FD)
    # What every call needs and a runner started for its build imports at its first call: here
    # while nobody waits (the load frame's header is JSON too).
    _json()
    # The first compile() of a process sets the compiler up (~1.7 ms here, Python 3.11): paid
    # here on a line of our own, not on the build's entry file inside a cold call.
    compile('def _warm(x):\n    return x\n', '<warm>', 'exec', dont_inherit=True)
    channel.send(b'{"type":"spare","pid":%d}' % os.getpid())
    while True:
        frame = channel.read_frame()
        if frame is None:
            return
        header = frame[0]
        if header.get('type') == 'load' and isinstance(header.get('entry'), str):
            break
    del frame
    serve(root + '/' + header['entry'], channel)


def serve(entry, channel=None):
    if channel is None:
        channel = Channel(CHANNEL_FD)
    _sdk_importable()
    # Counted from here: `ready` says how much the build printed while loading (which is no call's).
    _stdout.install()
    algo = load_algorithm(entry)
    if algo.load_error is None:
        # Built by hand: json is not imported yet, and need not be before we are ready.
        channel.send(b'{"type":"ready","pid":%d,"stdout_bytes":%d}' % (os.getpid(), _stdout.count))
    else:
        channel.send({'type': 'ready', 'pid': os.getpid(), 'load_error': algo.load_error, 'stdout_bytes': _stdout.count})
    _install_sdk(channel)
    from time import perf_counter
    while True:
        frame = channel.read_frame()
        if frame is None:  # the server closed the channel: time to go
            break
        header, body = frame
        if header.get('type') != 'call':
            continue
        try:
            handle_call(channel, algo, header, body, perf_counter)
        except OSError:
            raise
        except Exception as exc:  # in the runner itself (out of memory encoding a result, say)
            channel.send({'type': 'error', 'id': header.get('id'), 'duration_ms': 0, 'error': describe(exc, 'AlgorithmError')})
        del frame, header, body


def check(entry):
    """`--check <entry>` (builds): the entry imports and has a callable apply; load() is not run."""
    _sdk_importable()
    try:
        _import_entry(entry)
    except BaseException as exc:
        _flush_output()
        sys.stderr.write(_format_exception(exc))
        sys.stderr.flush()
        return 1
    _flush_output()
    return 0


def main(argv):
    if len(argv) == 2 and argv[0] == '--check':
        return check(argv[1])
    if len(argv) == 2 and argv[0] == '--spare':
        try:
            serve_spare(argv[1])
        except (BrokenPipeError, ConnectionResetError):
            pass
        return 0
    if len(argv) != 1:
        sys.stderr.write('usage: runner.py [--check | --spare <root>] <entry file>\n')
        return 2
    try:
        serve(argv[0])
    except (BrokenPipeError, ConnectionResetError):
        pass
    return 0


if __name__ == '__main__':
    code = main(sys.argv[1:])
    # The algorithm may have left threads behind (non-daemon ones would keep us alive).
    _flush_output()
    os._exit(code)
