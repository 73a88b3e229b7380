"""gcs_server.py - gcp-storage-emulator (PyPI) for the gs:// tests, with the
two parts of Cloud Storage's JSON API that shardkit relies on and the
emulator leaves out:

  gcs_server.py start --host 127.0.0.1 --port PORT --in-memory
                               (gcp-storage-emulator's own options)

- objects.list pages: maxResults and pageToken are honoured, items and
  prefixes are counted together in name order, and nextPageToken is set
  while more remain, as on Cloud Storage. The stock emulator answers every
  listing in one page, so a client's paging would go untested.
- generations: objects.get and alt=media downloads that name a
  generation= other than the object's live one get 404, as on Cloud
  Storage, and downloads carry x-goog-generation. The stock emulator
  ignores generation=, so a reader pinned to one could not see it change.
- resumable upload status: a session that holds no bytes answers 308
  with no Range (the emulator says "bytes=0-0", one byte it does not
  have), and a finished session keeps answering 200 with the object, as
  Cloud Storage's do for a week (the emulator forgets it: 404). A client
  whose last chunk's answer was lost asks exactly that.

Nothing else changes.
"""

import base64
import json
import sys
from http import HTTPStatus

try:
    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects
except ImportError as e:
    sys.exit("gcs_server.py: %s: pip install gcp-storage-emulator" % e)

_ls, _get, _download = objects.ls, objects.get, objects.download
_upload_partial = objects.upload_partial
_finished = {}


def _query(request, name):
    v = request.query.get(name)
    return v[0] if v else None


def _not_found(response, request, gen):
    response.status = HTTPStatus.NOT_FOUND
    response.json({"error": {"code": 404, "message": "No such object: %s/%s#%s"
                             % (request.params["bucket_name"],
                                request.params["object_id"], gen),
                             "errors": [{"reason": "notFound"}]}})


def _live_generation(request, storage):
    try:
        obj = storage.get_file_obj(request.params["bucket_name"],
                                   request.params["object_id"])
    except NotFound:
        return None
    return str(obj.get("generation"))


def _pinned(request, response, storage):
    """True when the request names a generation that is not the live one
    (the 404 is then set)."""
    gen = _query(request, "generation")
    if gen is None or (_query(request, "softDeleted") or "") in ("true", "1"):
        return False
    live = _live_generation(request, storage)
    if live is None or live == gen:
        return False
    _not_found(response, request, gen)
    return True


def download(request, response, storage, *args, **kwargs):
    if _pinned(request, response, storage):
        return
    _download(request, response, storage, *args, **kwargs)
    if response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
        live = _live_generation(request, storage)
        if live is not None:
            response["x-goog-generation"] = live


def get(request, response, storage, *args, **kwargs):
    if (_query(request, "alt") or "") == "media":
        return download(request, response, storage, *args, **kwargs)
    if _pinned(request, response, storage):
        return
    _get(request, response, storage, *args, **kwargs)


def ls(request, response, storage, *args, **kwargs):
    _ls(request, response, storage, *args, **kwargs)
    size = _query(request, "maxResults")
    token = _query(request, "pageToken")
    if response.status != HTTPStatus.OK or (size is None and token is None):
        return
    try:
        size = max(1, min(int(size or 1000), 1000))
        after = base64.urlsafe_b64decode(token).decode() if token else ""
    except ValueError:
        response.status = HTTPStatus.BAD_REQUEST
        response.json({"error": {"code": 400, "message": "Invalid argument"}})
        return
    page = json.loads(response._content)
    names = sorted([("o", o["name"], o) for o in page.get("items") or []] +
                   [("p", p, p) for p in page.get("prefixes") or []],
                   key=lambda e: e[1])
    names = [e for e in names if e[1] > after]
    out = {"kind": "storage#objects",
           "items": [e[2] for e in names[:size] if e[0] == "o"],
           "prefixes": [e[2] for e in names[:size] if e[0] == "p"]}
    if len(names) > size:
        out["nextPageToken"] = base64.urlsafe_b64encode(
            names[size - 1][1].encode()).decode()
    response.json(out)


def upload_partial(request, response, storage, *args, **kwargs):
    upload_id = _query(request, "upload_id")
    if upload_id in _finished:
        response.json(_finished[upload_id])
        return
    _upload_partial(request, response, storage, *args, **kwargs)
    if response.status == HTTPStatus.OK:
        _finished[upload_id] = json.loads(response._content)
    elif (response.status.value == 308 and
          storage.get_resumable_byte_count(upload_id) == 0):
        response._headers.pop("Range", None)


# The routing table holds the handlers themselves: replace them there.
_MINE = {_ls: ls, _get: get, _download: download,
         _upload_partial: upload_partial}
for _regex, _handlers in server.HANDLERS:
    for _method, _fn in list(_handlers.items()):
        if _fn in _MINE:
            _handlers[_method] = _MINE[_fn]

if __name__ == "__main__":
    from gcp_storage_emulator.__main__ import main
    main(sys.argv[1:])
