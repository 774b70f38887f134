"""$ref resolution inside one schema document: JSON pointers, $anchor, and $id-based URIs.

Remote references (a URI that no `$id` in the document names) raise CompileError, but
for the metaschemas of drafts 4, 6 and 7 (a schema whose members are schemas, as
Swagger 2.0's `#/definitions/schema` refers to draft 4's `properties/title`): their
documents come with `jsonschema` (jsonschema_specifications), and a reference to one
grafts it under REMOTE in a shallow copy of the root, so that its pointers are the
index's like any other.
"""
from __future__ import annotations

from urllib.parse import unquote, urldefrag, urljoin

from furca.errors import CompileError

# keywords whose value is a schema, an array of schemas, or an object of schemas by name:
# an `$id` or `$anchor` under any other (unknown) keyword names nothing (the test
# suite's optional/unknownKeyword.json), though a JSON pointer may still reach there
_SCHEMA = {"items", "additionalItems", "additionalProperties", "contains", "propertyNames", "if", "then",
           "else", "not", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
_SCHEMAS = {"allOf", "anyOf", "oneOf", "prefixItems"}
_SCHEMA_MAP = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
REMOTE = "x-furca-remote"  # where a known remote document is grafted (a key of the root's copy)
_KNOWN_REMOTE = ("http://json-schema.org/draft-04/schema", "http://json-schema.org/draft-06/schema",
                 "http://json-schema.org/draft-07/schema")


class RefIndex:
    """Maps a `$ref` string to (canonical pointer, subschema)."""

    def __init__(self, root, draft7: bool = False):
        self.draft7 = draft7
        self.root = root
        self.base = {}       # document pointer -> base URI in effect there
        self.by_uri = {}     # absolute URI (no fragment) -> document pointer
        self.anchors = {}    # (absolute URI, anchor) -> document pointer
        root_id = root.get("$id", root.get("id")) if isinstance(root, dict) else None
        self.root_uri = urldefrag(root_id)[0] if isinstance(root_id, str) else ""
        self.base["#"] = self.root_uri
        self._walk(root, [], self.root_uri, self.root_uri)

    def _walk(self, node, path, base, outer, kind="schema"):
        """Indexes node (at the pointer "#" + "/".join(path)); outer: the base URI in effect
        at its parent; kind: "schema", "map" (an object of schemas by name) or "list" (an
        array of schemas). `base` records only the pointers where the base URI changes
        (`base_at` looks up the nearest one above): no pointer string per node."""
        if isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, dict):
                    path.append(str(i))
                    self._walk(v, path, base, base)
                    path.pop()
            return
        if not isinstance(node, dict):
            return
        if kind == "map":
            for k, v in node.items():
                if isinstance(v, dict):
                    path.append(k.replace("~", "~0").replace("/", "~1"))
                    self._walk(v, path, base, base)
                    path.pop()
            return
        nid = node.get("$id") if not (self.draft7 and "$ref" in node) else None
        if nid is None and "$ref" not in node and isinstance(node.get("id"), str):
            nid = node["id"]
        anchor = node.get("$anchor")
        if isinstance(nid, str) or isinstance(anchor, str):
            ptr = "#" + "".join("/" + p for p in path)
            if isinstance(nid, str):
                uri, frag = urldefrag(urljoin(base, nid))
                if uri:
                    base = uri
                    self.by_uri.setdefault(base, ptr)
                if frag and not frag.startswith("/"):  # draft-7 style "$id": "#foo"
                    self.anchors[(base, frag)] = ptr
            if isinstance(anchor, str):
                self.anchors[(base, anchor)] = ptr
            if base != outer:
                self.base[ptr] = base
        for k, v in node.items():
            if not isinstance(v, (dict, list)):
                continue
            sub = "map" if k in _SCHEMA_MAP else "schema" if k in _SCHEMA or k in _SCHEMAS else None
            if sub is None:
                continue  # not a schema's place (an unknown keyword, enum, default...): its $ids name nothing
            path.append(k.replace("~", "~0").replace("/", "~1"))
            self._walk(v, path, base, base, sub)
            path.pop()

    def base_at(self, where: str) -> str:
        p = where
        while p:
            if p in self.base:
                return self.base[p]
            if "/" not in p:
                break
            p = p.rsplit("/", 1)[0]
        return self.root_uri

    def resolve(self, ref: str, where: str):
        """-> (pointer, subschema) or CompileError naming the ref and where it is."""
        if not isinstance(ref, str):
            raise CompileError("%s: $ref must be a string" % where)
        base = self.base_at(where)
        if ref.startswith("#"):
            uri, frag = base, ref[1:]
        else:
            uri, frag = urldefrag(urljoin(base, ref))
        if uri in self.by_uri:
            doc_ptr = self.by_uri[uri]
        elif not uri or uri == self.root_uri:
            doc_ptr = "#"
        elif (doc_ptr := self._graft(uri)) is not None:
            pass
        else:
            raise CompileError("%s: $ref %r is not in this document (remote references are not supported)" % (where, ref))
        if frag and not frag.startswith("/"):
            key = (uri, unquote(frag))
            if key not in self.anchors:
                raise CompileError("%s: $ref %r names an unknown anchor" % (where, ref))
            doc_ptr, frag = self.anchors[key], ""
        found = self._follow(doc_ptr, frag)
        if isinstance(found, str) and ref.startswith("#/") and doc_ptr != "#":
            # a pointer the nested `$id`'s subschema lacks, found from the document's root:
            # what its author meant (the spec calls it unresolvable; most tools, and
            # MaskBench's valid instances, read it from the root: maskbench-dev o6322,
            # o7573, o14404, whose nested ids name their own definitions)
            root = self._follow("#", frag)
            found = root if not isinstance(root, str) else found
        if isinstance(found, str):
            raise CompileError("%s: cannot resolve $ref %r (no %r)" % (where, ref, found))
        ptr, target = found
        if not isinstance(target, (dict, bool)):
            raise CompileError("%s: $ref %r does not point to a schema" % (where, ref))
        return ptr, target

    def _graft(self, uri: str):
        """The pointer of known remote document `uri` (grafted now if it is not yet), or None."""
        key = uri.replace("https://", "http://", 1)
        if key not in _KNOWN_REMOTE or not isinstance(self.root, dict):
            return None
        from jsonschema_specifications import REGISTRY
        if REMOTE not in self.root:
            self.root = dict(self.root, **{REMOTE: {}})
        name = str(len(self.root[REMOTE]))
        ptr = "#/%s/%s" % (REMOTE, name)
        # its own "#..." refs made pointers from the root: a subschema of it inlined
        # elsewhere (a merge, a proof) still finds what they name
        doc = _rebased(REGISTRY.contents(key + "#"), ptr)
        self.root[REMOTE][name] = doc
        self.by_uri[uri] = self.by_uri[key] = ptr
        self.base[ptr] = key
        self._walk(doc, [REMOTE, name], key, key)
        return ptr

    def _follow(self, doc_ptr, frag):
        """(pointer, node) of JSON pointer `frag` below doc_ptr, or the part it lacks."""
        target = self.get(doc_ptr)
        ptr = doc_ptr
        for part in (frag.split("/")[1:] if frag else []):
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return part
            ptr += "/" + part.replace("~", "~0").replace("/", "~1")
        return ptr, target

    def get(self, ptr: str):
        node = self.root
        for part in ptr.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node


def _rebased(node, ptr: str):
    """A copy of `node` whose "#..." $refs point from the root where `ptr` holds it."""
    if isinstance(node, list):
        return [_rebased(v, ptr) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rebased(v, ptr) for k, v in node.items()}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and not ref.startswith("#/" + REMOTE):
        out["$ref"] = ptr + ref[1:]
    return out
