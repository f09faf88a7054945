"""Older drafts' spellings and in-document identifiers, rewritten into the 2020-12 subset the
compiler reads, before anything else looks at a schema.

Draft 4 `id`, boolean `exclusiveMinimum`/`exclusiveMaximum`, `dependencies`, array-form
`items` + `additionalItems` become `$id`, numeric bounds, `dependentRequired` /
`dependentSchemas`, `prefixItems` + `items`. Every `$ref` that resolves inside the document
(an `$id`'d resource by relative or absolute URI, an `#anchor`, a `#/pointer` against the
nearest resource) becomes a root-relative `#/...` pointer and the identifiers are dropped, so
the compiler resolves plain pointers only; nothing is ever fetched. An unknown `format` is an
annotation (as validators treat it) and is dropped; a known one stays, enforced or refused.

Only real subschema positions are rewritten: never `enum`/`const`/`default`/`examples`
values or the names in a `properties` map. The draft comes from `$schema`; without it, each
old spelling is read where it can only mean one thing (a boolean exclusiveMinimum is draft
4), and `id` is read as a base URI only if every `$ref` resolves the same either way.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urldefrag, urljoin

from .errors import UnsupportedSchemaError

# Where subschemas sit: one schema, a list of schemas, a map of name -> schema.
ONE = ("additionalProperties", "propertyNames", "items", "additionalItems", "contains", "not",
       "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
KNOWN_FORMATS = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname",
                 "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference",
                 "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex"}
_DRAFTS = (("draft-03", 3), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7),
           ("2019-09", 2019), ("2020-12", 2020))
_DEFAULT_BASE = "https://sglang-lite.invalid/schema.json"
_ANCHOR = re.compile(r"[A-Za-z_][-A-Za-z0-9._:]*$")


# Each subschema keyword's positions, in the order subschemas() yields them (ONE, MANY, MAP;
# "items" is both a schema and, in old drafts, a list of them).
_POSITIONS: dict[str, list[tuple[int, str]]] = {}
for _rank, (_key, _kind) in enumerate([*((k, "one") for k in ONE), *((k, "many") for k in MANY),
                                       *((k, "map") for k in MAP)]):
    _POSITIONS.setdefault(_key, []).append((_rank, _kind))


def subschemas(node: dict):
    """(keyword, key or index or None, subschema) for each subschema position of ``node``:
    ONE's keywords first, then MANY's, then MAP's, each in its tuple's order. Found from the
    node's own keys (a few) rather than by looking up every keyword."""
    found = [pos for key in node if key in _POSITIONS for pos in _POSITIONS[key]]
    if len(found) > 1:
        found.sort()
    for rank, kind in found:
        key = _KEYWORDS[rank]
        sub = node[key]
        if kind == "one":
            if isinstance(sub, (dict, bool)):
                yield key, None, sub
        elif kind == "many":
            if isinstance(sub, list):
                for i, item in enumerate(sub):
                    yield key, i, item
        elif isinstance(sub, dict):
            for name, item in sub.items():
                if isinstance(item, (dict, bool)):
                    yield key, name, item


_KEYWORDS = (*ONE, *MANY, *MAP)


def draft_of(root) -> int | None:
    uri = root.get("$schema") if isinstance(root, dict) else None
    if not isinstance(uri, str):
        return None
    for tag, draft in _DRAFTS:
        if tag in uri:
            if draft == 3:
                raise UnsupportedSchemaError.at("$schema", "/$schema", "draft-03 is not supported")
            return draft
    return None


def normalize_drafts(root):
    """``root`` (freshly parsed JSON) in the compiler's 2020-12 spelling, refs root-relative."""
    if not isinstance(root, dict):
        return root
    draft = draft_of(root)
    if draft is not None:
        return _Document(root, draft, draft == 4).rewrite()
    as_ids = _Document(root, None, True)
    if not as_ids.reads_id:
        return as_ids.rewrite()
    as_annotations = _Document(root, None, False)
    outcomes = []
    for doc in (as_ids, as_annotations):
        try:
            outcomes.append(doc.resolve_all())
        except UnsupportedSchemaError as e:
            outcomes.append(e)
    if all(isinstance(o, UnsupportedSchemaError) for o in outcomes):
        raise outcomes[0]
    if not any(isinstance(o, UnsupportedSchemaError) for o in outcomes) and outcomes[0] != outcomes[1]:
        raise UnsupportedSchemaError.at(
            "id", as_ids.reads_id[0], "without $schema may be a draft-4 base URI or an annotation, "
            "and $refs resolve differently under the two readings; add $schema")
    return (as_ids if not isinstance(outcomes[0], UnsupportedSchemaError) else as_annotations).rewrite()


class _Document:
    """One reading of a document: its resources, anchors and refs, then the rewritten copy."""

    def __init__(self, root: dict, draft: int | None, id_keyword: bool):
        self.root = root
        self.draft = draft
        self.id_keyword = id_keyword  # draft 4's `id` names a base URI
        self.reads_id: list[str] = []  # pointers of `id`s read as base URIs (no $schema)
        self.resources: dict[str, tuple] = {}  # base URI -> path of the schema naming it
        self.anchors: dict[tuple[str, str], tuple] = {}
        self.refs: list[tuple[tuple, str, str]] = []  # (path of the schema, base, $ref)
        self.schemas: dict[int, tuple] = {}  # id(node) -> path, for every schema walked
        self._walk(root, (), _DEFAULT_BASE)
        self.resources.setdefault(_DEFAULT_BASE, ())

    # ---- indexing -------------------------------------------------------------------------

    def _identifier(self, node: dict, path: tuple) -> str | None:
        if "$ref" in node and self.draft is not None and self.draft <= 7:
            return None  # before 2019-09, $ref's siblings (an id too) are ignored
        if isinstance(node.get("$id"), str) and self.draft != 4:
            return node["$id"]
        if self.id_keyword and isinstance(node.get("id"), str) and "$id" not in node:
            if self.draft is None:
                self.reads_id.append(_pointer(path + ("id",)))
            return node["id"]
        return None

    def _walk(self, node, path: tuple, base: str) -> None:
        if not isinstance(node, dict) or id(node) in self.schemas:
            return
        self.schemas[id(node)] = path
        ident = self._identifier(node, path)
        if ident is not None:
            uri, fragment = urldefrag(_join(base, ident))
            if uri and uri != base and not ident.startswith("#"):
                base = uri
                self.resources.setdefault(uri, path)
            if fragment and _ANCHOR.match(fragment):  # draft 6/7 "$id": "#name" is an anchor
                self.anchors.setdefault((base, fragment), path)
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                self.anchors.setdefault((base, node[key]), path)
        if isinstance(node.get("$ref"), str):
            self.refs.append((path, base, node["$ref"]))
        for key, sub_key, sub in subschemas(node):
            self._walk(sub, path + ((key,) if sub_key is None else (key, sub_key)), base)

    # ---- resolving ------------------------------------------------------------------------

    def resolve_all(self) -> dict[tuple, str]:
        """Each $ref (by the path of its schema) as a root-relative pointer into the rewritten
        document. Targets the walk did not reach (a pointer into an unknown keyword) are walked
        on demand, which may add refs: the loop runs until none is left."""
        out = {}
        i = 0
        while i < len(self.refs):
            path, base, ref = self.refs[i]
            out[path] = self._resolve(path, base, ref)
            i += 1
        return out

    def _resolve(self, path: tuple, base: str, ref: str) -> str:
        where = _pointer(path + ("$ref",))
        uri, fragment = urldefrag(_join(base, ref))
        if uri not in self.resources:
            raise UnsupportedSchemaError.at("$ref", where, f"value {ref!r} does not resolve inside "
                                            "the document (remote references are never fetched)")
        if fragment and not fragment.startswith("/"):
            target = self.anchors.get((uri, unquote(fragment)))
            if target is None:
                raise UnsupportedSchemaError.at("$ref", where, f"value {ref!r}: no anchor "
                                                f"{fragment!r} in the document")
        else:
            parts = [unquote(p).replace("~1", "/").replace("~0", "~") for p in fragment.split("/")[1:]]
            target = self.resources[uri] + tuple(parts)
            node = self._node(target)
            if node is not None and id(node) not in self.schemas:
                self._walk(node, target, uri)
        return "#" + _pointer(self._translate(target), fragment=True)

    def _node(self, path: tuple):
        node = self.root
        for part in path:
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                return None
        return node

    def _translate(self, path: tuple) -> tuple:
        """A path in the original document as a path in the rewritten one (array-form items
        become prefixItems, additionalItems items, dependencies dependentRequired/Schemas)."""
        out, node = [], self.root
        for i, part in enumerate(path):
            new = part
            if isinstance(node, dict) and id(node) in self.schemas:
                listed = isinstance(node.get("items"), list)
                if part == "items" and listed:
                    new = "prefixItems"
                elif part == "additionalItems" and listed:
                    new = "items"
                elif part == "dependencies" and i + 1 < len(path):
                    dep = node.get("dependencies", {}).get(path[i + 1]) if isinstance(
                        node.get("dependencies"), dict) else None
                    new = "dependentRequired" if isinstance(dep, list) else "dependentSchemas"
            out.append(new)
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                return tuple(out) + tuple(path[i + 1:])
        return tuple(out)

    # ---- rewriting ------------------------------------------------------------------------

    def rewrite(self):
        self._refs = self.resolve_all()
        return self._copy(self.root)

    def _copy(self, node):
        if isinstance(node, dict):
            if id(node) in self.schemas:
                return self._rewrite_schema(node)
            return {k: self._copy(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self._copy(v) for v in node]
        return node

    def _rewrite_schema(self, node: dict) -> dict:
        path = self.schemas[id(node)]
        out = {}
        for key, value in node.items():
            if key in ("$id", "$anchor", "$schema") or key == "id" and self._reads_id(node):
                continue  # refs are root-relative now; the dialect is 2020-12
            if key == "$ref" and path in self._refs:
                out[key] = self._refs[path]
            elif key == "format" and isinstance(value, str) and value not in KNOWN_FORMATS:
                continue  # an unknown format is an annotation
            elif key in ("enum", "const", "default", "examples"):
                out[key] = value
            else:
                out[key] = self._copy(value)
        _fold_exclusive_bounds(out)
        _split_dependencies(out, path)
        _prefix_items(out)
        return out

    def _reads_id(self, node: dict) -> bool:
        return self.id_keyword and isinstance(node.get("id"), str) and "$id" not in node


def _fold_exclusive_bounds(schema: dict) -> None:
    """Draft 4: `exclusiveMinimum: true` makes `minimum` exclusive (false: no effect)."""
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(schema.get(flag), bool):
            if schema.pop(flag) and bound in schema:
                schema[flag] = schema.pop(bound)


def _split_dependencies(schema: dict, path: tuple) -> None:
    deps = schema.pop("dependencies", None)
    if deps is None:
        return
    if not isinstance(deps, dict):
        from .errors import InvalidConstraintError

        raise InvalidConstraintError(f"dependencies at {_pointer(path)}/dependencies must be an object")
    for name, dep in deps.items():
        if isinstance(dep, list):
            names = schema.setdefault("dependentRequired", {}).setdefault(name, [])
            names.extend(n for n in dep if n not in names)
        else:
            schemas = schema.setdefault("dependentSchemas", {})
            schemas[name] = dep if name not in schemas else {"allOf": [schemas[name], dep]}


def _prefix_items(schema: dict) -> None:
    """Array-form items (drafts before 2020-12) are prefixItems; additionalItems then covers
    the rest. Next to a single-schema items (or none), additionalItems has no effect."""
    extra = schema.pop("additionalItems", None)
    if isinstance(schema.get("items"), list):
        schema["prefixItems"] = schema.pop("items")
        if extra is not None:
            schema["items"] = extra


def _join(base: str, ref: str) -> str:
    """``ref`` against ``base``; a bare fragment keeps any base (urljoin drops a urn: one)."""
    return urldefrag(base)[0] + ref if ref.startswith("#") else urljoin(base, ref)


def resolve_pointer(root, ref: str):
    """The node a root-relative '#/...' ref names, or None."""
    node = root
    for raw in ref[2:].split("/") if len(ref) > 1 else []:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return None
    return node


def _pointer(path: tuple, fragment: bool = False) -> str:
    """A JSON pointer; as a URI fragment (``fragment``) percent-encoded where one needs it."""
    parts = (str(p).replace("~", "~0").replace("/", "~1") for p in path)
    return "".join("/" + (quote(p, safe="~!$&'()*+,;=:@") if fragment else p) for p in parts)


__all__ = ["KNOWN_FORMATS", "draft_of", "normalize_drafts", "resolve_pointer", "subschemas"]
