"""check_json_keys.py - a tool's --json documents against the key list in
its man page, both ways, and the key style of shardkit-cli(7).

  check_json_keys.py PAGE.1 DOC.json...

PAGE's "JSON OUTPUT" section has one ".Ss TOOL" subsection per document
kind, TOOL being the document's "tool" value, listing every key as
".It Li dotted.path" (arrays as "name[]."). Every key a document holds must
be listed, and every listed key must be in the document (keys below an
empty array excepted). Every key is snake_case and no unit is spelled
other than _bytes, _seconds, _per_second, _usd, _share.
"""

import json
import re
import sys

from sktest import check, fail, say

BAD_SUFFIX = re.compile(r"_(s|sec|secs|ms|us|mib|mb|kb|gib|ips|per_s|per_sec|pct|percent)$")
KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def documented(page):
    """{tool: set of keys} from the JSON OUTPUT section of an mdoc page."""
    out = {}
    cur = None
    inside = False
    with open(page) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(".Sh "):
                inside = line[4:].strip('"') == "JSON OUTPUT"
                cur = None
                continue
            if not inside:
                continue
            if line.startswith(".Ss "):
                cur = line[4:].strip('"')
                check(cur not in out, "%s: two subsections %s" % (page, cur))
                out[cur] = set()
            elif line.startswith(".It Li ") and cur is not None:
                k = line[len(".It Li "):].split()[0]
                check(k not in out[cur], "%s: %s: %s listed twice" % (page, cur, k))
                out[cur].add(k)
    check(out, "%s has no JSON OUTPUT section with .Ss subsections" % page)
    return out


def flatten(v, prefix, keys, empty):
    if isinstance(v, dict):
        for k, x in v.items():
            p = prefix + k
            keys.add(p)
            flatten(x, p + ".", keys, empty)
    elif isinstance(v, list):
        arr = prefix[:-1] + "[]."
        if not v:
            empty.add(arr)
        for x in v:
            flatten(x, arr, keys, empty)


def style(path, keys):
    for k in sorted(keys):
        for seg in k.replace("[]", "").split("."):
            check(KEY.match(seg), "%s: key %s is not snake_case" % (path, k))
            check(not BAD_SUFFIX.search(seg), "%s: key %s spells a unit other than "
                  "_bytes, _seconds, _per_second, _usd, _share" % (path, k))


def main():
    page = sys.argv[1]
    docs = documented(page)
    seen = set()
    for path in sys.argv[2:]:
        with open(path) as f:
            text = f.read()
        try:
            d = json.loads(text)
        except ValueError as e:
            fail("%s is not JSON (%s):\n%s" % (path, e, text[:2000]))
        check(isinstance(d, dict), "%s is not a JSON object" % path)
        check(d.get("schema") == 1, "%s: schema is %r, not 1" % (path, d.get("schema")))
        tool = d.get("tool")
        check(tool in docs, "%s: tool %r has no subsection in %s (it has %s)"
              % (path, tool, page, sorted(docs)))
        check(list(d)[:3] == ["schema", "tool", "version"],
              "%s: the document does not start with schema, tool, version: %s" % (path, list(d)[:3]))
        keys, empty = set(), set()
        flatten(d, "", keys, empty)
        style(path, keys)
        undoc = sorted(keys - docs[tool])
        check(not undoc, "%s: %s writes keys %s does not list: %s" % (path, tool, page, undoc))
        missing = sorted(k for k in docs[tool] - keys
                         if not any(k.startswith(e) for e in empty))
        check(not missing, "%s: %s lists keys %s did not write: %s" % (page, tool, path, missing))
        seen.add(tool)
        say("%s: %d keys of %s, all in %s" % (path, len(keys), tool, page))
    unrun = sorted(set(docs) - seen)
    check(not unrun, "%s documents %s, which the test did not run" % (page, unrun))


main()
