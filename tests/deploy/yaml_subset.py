"""A small reader for the block-style YAML that `kubectl kustomize` prints (standard library only;
CI has no PyYAML). Supports: documents split by `---`, block mappings and sequences (including
sequences at their parent key's indent, as kustomize writes them), plain / single- / double-quoted
scalars, simple flow lists and maps on one line, block scalars (| and >), comments. Scalars stay
strings, except that `null`/`~`/empty become None. Not a general YAML parser: anchors, tags,
multi-line flow collections and complex keys are rejected or unsupported."""
import json
import re


class YamlSubsetError(ValueError):
    pass


def _strip_comment(text):
    out, quote = [], None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'" and (i == 0 or text[i - 1] in " [{,:"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            break
        out.append(ch)
    return "".join(out).rstrip()


def _split_flow(body):
    items, cur, depth, quote = [], [], 0, None
    for i, ch in enumerate(body):
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'" and "".join(cur).strip() == "":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        items.append("".join(cur).strip())
    return items


def _split_key(text):
    """'key: value' -> (key, value) or None when text is not a mapping entry."""
    if text[:1] in "\"'":
        q = text[0]
        end = text.find(q, 1)
        while q == "'" and end != -1 and text[end + 1:end + 2] == "'":
            end = text.find(q, end + 2)
        if end == -1:
            raise YamlSubsetError("unterminated quoted key: " + text)
        rest = text[end + 1:]
        if rest == ":" or rest.startswith(": "):
            return scalar(text[:end + 1]), rest[1:].strip()
        return None
    m = re.match(r"^([^\s\"'#\[\]{},][^#]*?):(?:\s+(.*))?$", text)
    if not m:
        return None
    return m.group(1), (m.group(2) or "").strip()


def scalar(text):
    text = text.strip()
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text[0] == '"':
        if not text.endswith('"') or len(text) < 2:
            raise YamlSubsetError("bad double-quoted scalar: " + text)
        return json.loads(text.replace("\\/", "/"))
    if text[0] == "'":
        if not text.endswith("'") or len(text) < 2:
            raise YamlSubsetError("bad single-quoted scalar: " + text)
        return text[1:-1].replace("''", "'")
    if text[0] == "[":
        if not text.endswith("]"):
            raise YamlSubsetError("multi-line flow list not supported: " + text)
        return [scalar(x) for x in _split_flow(text[1:-1])]
    if text[0] == "{":
        if not text.endswith("}"):
            raise YamlSubsetError("multi-line flow map not supported: " + text)
        out = {}
        for item in _split_flow(text[1:-1]):
            kv = _split_key(item)
            if kv is None:
                raise YamlSubsetError("bad flow map entry: " + item)
            out[kv[0]] = scalar(kv[1])
        return out
    if text[0] in "&*!":
        raise YamlSubsetError("anchors, aliases and tags are not supported: " + text)
    return text


class _Reader:
    def __init__(self, raw_lines):
        self.raw = raw_lines  # (indent, text-with-comment-stripped, raw line)
        self.i = 0

    def skip_blank(self):
        while self.i < len(self.raw) and self.raw[self.i][1] == "":
            self.i += 1

    def peek(self):
        self.skip_blank()
        return self.raw[self.i] if self.i < len(self.raw) else None

    def node(self, indent):
        line = self.peek()
        if line is None or line[0] < indent:
            return None
        if line[1] == "-" or line[1].startswith("- "):
            return self.sequence(line[0])
        return self.mapping(line[0])

    def sequence(self, indent):
        out = []
        while True:
            line = self.peek()
            if line is None or line[0] != indent or not (line[1] == "-" or line[1].startswith("- ")):
                return out
            rest = line[1][1:].strip()
            if rest == "":
                self.i += 1
                out.append(self.node(indent + 1))
            else:
                # Re-read the item's text as a line of its own, two columns further in.
                off = len(line[1]) - len(line[1][1:].lstrip())
                self.raw[self.i] = (indent + off, rest, line[2])
                out.append(self.item(indent + off))

    def item(self, indent):
        line = self.peek()
        if _split_key(line[1]) is not None or line[1] == "-" or line[1].startswith("- "):
            return self.node(indent)
        self.i += 1
        return self.value(line[1], indent)

    def mapping(self, indent):
        out = {}
        while True:
            line = self.peek()
            if line is None or line[0] < indent:
                return out
            if line[0] > indent:
                raise YamlSubsetError("unexpected indent: " + line[2])
            if line[1] == "-" or line[1].startswith("- "):
                return out
            kv = _split_key(line[1])
            if kv is None:
                raise YamlSubsetError("expected 'key: value': " + line[2])
            key, val = kv
            self.i += 1
            if val == "":
                nxt = self.peek()
                if nxt is not None and (nxt[0] > indent or (
                        nxt[0] == indent and (nxt[1] == "-" or nxt[1].startswith("- ")))):
                    out[key] = self.node(nxt[0])
                else:
                    out[key] = None
            else:
                out[key] = self.value(val, indent)

    def value(self, val, indent):
        m = re.match(r"^([|>])([+-]?)$", val)
        if not m:
            return scalar(val)
        # Block scalar: every following line indented deeper than the key (blank lines kept).
        body = []
        while self.i < len(self.raw):
            ind, text, raw = self.raw[self.i]
            if raw.strip() != "" and ind <= indent:
                break
            body.append(raw)
            self.i += 1
        while body and body[-1].strip() == "":
            body.pop()
        base = min((len(l) - len(l.lstrip(" ")) for l in body if l.strip()), default=0)
        lines = [l[base:] for l in body]
        text = "\n".join(lines) if m.group(1) == "|" else " ".join(l.strip() for l in lines)
        return text if m.group(2) == "-" else text + "\n"


def load_all(text):
    docs, cur = [], []
    for raw in text.splitlines():
        if raw.startswith("---"):
            docs.append(cur)
            cur = []
            continue
        if raw.startswith("%") or raw.startswith("..."):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlSubsetError("tab indentation: " + raw)
        stripped = raw.lstrip(" ")
        cur.append((len(raw) - len(stripped), _strip_comment(stripped), raw))
    docs.append(cur)
    out = []
    for lines in docs:
        r = _Reader(lines)
        if r.peek() is None:
            continue
        value = r.node(0)
        if r.peek() is not None:
            raise YamlSubsetError("trailing content: " + r.peek()[2])
        out.append(value)
    return out
