# The in-algorithm SDK for Python: `import algohost; client = algohost.client()` (also
# `import Algorithmia; Algorithmia.client()`, as in the original service). Every operation is
# an HTTP request of the public API, carried over the control channel by the runner and run by
# the server as the call's identity: `.my` is the caller, nested calls get what is left of this
# call's time. Standard library only; synchronous, like the algorithms that use it.
import json as _json
import sys as _sys
from urllib.parse import quote as _quote, urlencode as _urlencode

# The runner's transport: (method, url, headers, body) -> (status, headers, body, error). The
# runner sets it here if this module was imported while the algorithm loaded; imported later,
# it takes it from the runner (__main__), which does not import the SDK for algorithms that
# never use it.
_request = getattr(_sys.modules.get('__main__'), '_algohost_request', None)


class AlgohostError(Exception):
    """An error the platform or another algorithm answered with."""

    def __init__(self, message, status=None, code=None, error_type=None, stacktrace=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.error_type = error_type
        self.stacktrace = stacktrace


def _data_url(uri):
    scheme, sep, rest = str(uri).partition('://')
    if not sep or not scheme:
        raise AlgohostError(f'"{uri}" is not a data URI such as data://.my/collection/file', code='invalid_path')
    return f'/v1/connector/{scheme.lower()}/{_quote(rest.lstrip("/"), safe="/")}'


def _body_of(data):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return 'application/octet-stream', bytes(data)
    if isinstance(data, str):
        return 'text/plain; charset=utf-8', data.encode('utf-8')
    return 'application/json', _json.dumps(data).encode('utf-8')


def _send(method, url, body=b'', content_type=None, accept=None):
    if _request is None:
        raise AlgohostError('the algohost client works inside a running algorithm only')
    headers = {}
    if content_type:
        headers['content-type'] = content_type
    if accept:
        headers['accept'] = accept
    status, resp_headers, resp_body, error = _request(method, url, headers, body)
    if status == 0:
        raise AlgohostError(error or 'the request could not be made')
    return status, resp_headers, resp_body


def _failure(status, body):
    message, code = f'the server answered {status}', None
    try:
        err = _json.loads(body.decode('utf-8')).get('error') or {}
        message = err.get('message') or message
        code = err.get('code')
    except (ValueError, AttributeError, UnicodeDecodeError):
        pass
    return AlgohostError(message, status=status, code=code)


def _ok(method, url, **kw):
    status, headers, body = _send(method, url, **kw)
    if not 200 <= status < 300:
        raise _failure(status, body)
    return headers, body


def _data_type(uri):
    """'file', 'directory', or None when nothing (visible to the caller) is there."""
    status, headers, body = _send('HEAD', _data_url(uri))
    if status == 404:
        return None
    if 200 <= status < 300:
        return 'directory' if headers.get('x-data-type') == 'directory' else 'file'
    raise _failure(status, body)


class DataFile:
    def __init__(self, uri):
        self.uri = uri
        self.path = uri

    def getBytes(self):
        return _ok('GET', _data_url(self.uri), accept='application/octet-stream')[1]

    get = getBytes

    def getString(self):
        return self.getBytes().decode('utf-8')

    def getJson(self):
        return _json.loads(self.getString())

    def put(self, data):
        """Stores bytes, a str, or anything else as JSON."""
        content_type, body = _body_of(data)
        _ok('PUT', _data_url(self.uri), body=body, content_type=content_type)
        return self

    def putJson(self, data):
        _ok('PUT', _data_url(self.uri), body=_json.dumps(data).encode('utf-8'), content_type='application/json')
        return self

    def exists(self):
        return _data_type(self.uri) == 'file'

    def delete(self):
        _ok('DELETE', _data_url(self.uri))


class DataDirectory:
    def __init__(self, uri):
        self.uri = str(uri).rstrip('/')
        self.path = self.uri

    def file(self, name):
        return DataFile(f'{self.uri}/{name}')

    def create(self, acl=None):
        parent, _, name = self.uri.rpartition('/')
        payload = {'name': name}
        if acl is not None:
            payload['acl'] = acl
        _ok('POST', _data_url(parent), body=_json.dumps(payload).encode('utf-8'), content_type='application/json')
        return self

    def exists(self):
        return _data_type(self.uri) == 'directory'

    def delete(self, force=False):
        _ok('DELETE', _data_url(self.uri) + ('?force=true' if force else ''))

    def list(self):
        """Every entry, page after page: DataDirectory and DataFile objects."""
        marker = None
        while True:
            url = _data_url(self.uri) + (('?' + _urlencode({'marker': marker})) if marker else '')
            page = _json.loads(_ok('GET', url, accept='application/json')[1].decode('utf-8'))
            for f in page.get('folders') or []:
                yield DataDirectory(f'{self.uri}/{f["name"]}')
            for f in page.get('files') or []:
                entry = DataFile(f'{self.uri}/{f["filename"]}')
                entry.size = f.get('size')
                entry.last_modified = f.get('last_modified')
                yield entry
            marker = page.get('marker')
            if not marker:
                return

    def files(self):
        return (e for e in self.list() if isinstance(e, DataFile))

    def dirs(self):
        return (e for e in self.list() if isinstance(e, DataDirectory))


class AlgoResponse:
    def __init__(self, result, metadata):
        self.result = result
        self.metadata = metadata

    def __repr__(self):
        return f'AlgoResponse(result={self.result!r}, metadata={self.metadata!r})'


class Algorithm:
    def __init__(self, ref):
        self.ref = str(ref)[len('algo://'):] if str(ref).startswith('algo://') else str(ref)

    def pipe(self, input, timeout=None, stdout=False):
        """Calls the algorithm; returns an AlgoResponse, raises AlgohostError with its error."""
        content_type, body = _body_of(input)
        query = {}
        if timeout is not None:
            query['timeout'] = str(timeout)
        if stdout:
            query['stdout'] = 'true'
        url = f'/v1/algo/{_quote(self.ref, safe="/*.")}' + (('?' + _urlencode(query)) if query else '')
        _, resp = _ok('POST', url, body=body, content_type='text/plain' if content_type.startswith('text/') else content_type)
        envelope = _json.loads(resp.decode('utf-8'))
        error = envelope.get('error')
        if error:
            raise AlgohostError(error.get('message'), error_type=error.get('error_type'), stacktrace=error.get('stacktrace'))
        metadata = envelope.get('metadata') or {}
        result = envelope.get('result')
        if metadata.get('content_type') == 'binary':
            import base64
            result = base64.b64decode(result)
        return AlgoResponse(result, metadata)


class Client:
    def algo(self, ref):
        return Algorithm(ref)

    def file(self, uri):
        return DataFile(uri)

    def dir(self, uri):
        return DataDirectory(uri)


_client = Client()


def client(api_key=None, api_address=None):
    """The client of the running call (a key or address, as the original took, is ignored)."""
    return _client
