"""`triforce batch`, reading: JSONL lines -> validated jobs, or error records naming the cause.

Nothing a line holds may crash the driver or a replica: numbers are checked against the ranges the
wire (msgpack: 64-bit integers) and the model accept, floats must be finite, text must be valid
UTF-8 (no lone surrogates from JSON escapes), nesting is bounded, and every failure becomes an
error record with the line number.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import msgpack

from triforce.runtime.config import RunConfig
from triforce.runtime.errors import UserError

MAX_MESSAGE_BYTES = 64 << 20   # largest job or result message between the driver and a replica
MAX_LINE_BYTES = MAX_MESSAGE_BYTES // 2   # largest input line (room left for the job's envelope)
RECORD_PARAMS = {"max_new_tokens": int, "temperature": float, "top_p": float, "top_k": int, "seed": int,
                 "mode": str}  # per-record overrides of the run defaults, with their types
PROMPT_KEYS = ("prompt", "prompt_file", "messages")
TYPE_NAMES = {int: "an int", float: "a number", str: "a string"}
INT_RANGES = {"max_new_tokens": (1, 2**31 - 1),   # tokens; the model's positions bound it further
              "top_k": (0, 2**31 - 1),            # 0 = off; torch.topk clamps to the vocabulary
              "seed": (0, 2**63 - 1)}             # torch.Generator.manual_seed and msgpack both take int64
MAX_ID_CHARS = 1024            # an id is a key, not a payload


# ---------------------------------------------------------------------------------------- wire
def pack(message: dict) -> bytes:
    """dict -> msgpack bytes; ValueError (never OverflowError or UnicodeEncodeError) for what the
    wire cannot carry: integers beyond 64 bits, lone surrogates, more than MAX_MESSAGE_BYTES."""
    try:
        data = msgpack.packb(message, use_bin_type=True)
    except (OverflowError, UnicodeEncodeError, TypeError) as e:
        raise ValueError(f"message cannot be sent as msgpack ({type(e).__name__}: {e})") from None
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    return data


def unpack(data: bytes) -> dict:
    """msgpack bytes -> dict; refuses oversized input before decoding it (msgpack also bounds
    every string, array and map by the input's length)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.exceptions.ExtraData, msgpack.exceptions.FormatError, msgpack.exceptions.StackError,
            UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed msgpack message ({type(e).__name__}: {e})") from None
    if not isinstance(message, dict):
        raise ValueError(f"expected a msgpack map, got {type(message).__name__}")
    return message


# ------------------------------------------------------------------------------------- records
def error_record(job_id: str, line: int, reason: str, retryable: bool = False) -> dict:
    """retryable: the cause was the machinery (a replica died, a deadline), not the record, so
    --resume runs the record again; --retry-errors runs every error record again."""
    record = {"id": job_id, "status": "error", "error": f"line {line}: {reason}", "text": None, "token_ids": [],
              "stats": {}, "line": line}
    if retryable:
        record["retryable"] = True
    return record


def _utf8(value: str, what: str) -> str:
    """value, or UserError if it holds a lone surrogate (JSON "\\ud800" escapes decode to one)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{what} is not valid UTF-8 text (lone surrogate {value[e.start]!r} at character "
                        f"{e.start}); send real characters") from None
    return value


def _number(key: str, value: object, kind: type) -> int | float | str:
    """value checked against its type and range, or UserError naming it."""
    ok = (isinstance(value, kind) and not isinstance(value, bool)) or \
         (kind is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise UserError(f"{key} {_short(value)} must be {TYPE_NAMES[kind]}")
    if kind is str:
        return _utf8(value, key)
    if kind is float:
        try:
            value = float(value)   # an int of 400 digits overflows here
        except OverflowError:
            raise UserError(f"{key} {_short(value)} is too large; must be a finite number") from None
        if not math.isfinite(value):
            raise UserError(f"{key} {value!r} must be finite")
        return value
    low, high = INT_RANGES[key]
    if not low <= value <= high:
        raise UserError(f"{key} {_short(value)} must be between {low} and {high}")
    return value


def _short(value: object, limit: int = 40) -> str:
    """repr of a user's value, cut to `limit` characters (a 400-digit number fits an error line badly)."""
    try:
        text = repr(value)
    except ValueError:   # an int beyond sys.get_int_max_str_digits
        return f"<a {type(value).__name__} too large to print>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_params(params: dict, defaults: RunConfig) -> RunConfig:
    """The record's RunConfig, or UserError naming the bad parameter."""
    checked = {key: _number(key, value, RECORD_PARAMS[key]) for key, value in params.items()}
    return dataclasses.replace(defaults, **checked).validate()


def check_defaults(defaults: RunConfig) -> RunConfig:
    """The run's defaults (flags, YAML) checked like a record's parameters: a --seed of 2**64 is
    refused at the start, not in every record."""
    check_params({key: getattr(defaults, key) for key in RECORD_PARAMS}, defaults)
    return defaults


def _check_prompt(key: str, value: object, base: Path) -> object:
    if key == "prompt":
        if not (isinstance(value, str) and value.strip()):
            raise UserError("prompt must be a non-empty string")
        return _utf8(value, "prompt")
    if key == "prompt_file":
        if not (isinstance(value, str) and value):
            raise UserError("prompt_file must be a path string")
        _utf8(value, "prompt_file")
        if "\0" in value:
            raise UserError(f"prompt_file {_short(value)} holds a NUL character")
        path = base / Path(value).expanduser()  # relative paths: relative to the input file
        try:
            found = path.is_file()
        except OSError as e:   # a name too long, a loop of links
            raise UserError(f"prompt file {_short(value)} cannot be read ({e.strerror})") from None
        if not found:
            raise UserError(f"prompt file {value!r} does not exist (looked for {str(path)!r})")
        return str(path)
    if not (isinstance(value, list) and value and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value)):
        raise UserError('messages must be a non-empty list of {"role": str, "content": str}')
    for n, m in enumerate(value):
        _utf8(m["role"], f"messages[{n}].role")
        _utf8(m["content"], f"messages[{n}].content")
    return [{"role": m["role"], "content": m["content"]} for m in value]   # other keys never reach the template


def check_job(raw: object, line: int, base: Path, defaults: RunConfig) -> dict:
    """A validated job {"line", "id", <prompt key>, "params"}, or UserError with the reason."""
    if not isinstance(raw, dict):
        raise UserError(f"expected a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"id", *PROMPT_KEYS, *RECORD_PARAMS})
    if unknown:
        shown = ", ".join((k if len(k) <= 40 else _short(k)) if _is_utf8(k) else ascii(k) for k in unknown[:10])
        raise UserError(f"unknown key(s) {shown}; known: id, {', '.join(PROMPT_KEYS)}, {', '.join(RECORD_PARAMS)}")
    given = [k for k in PROMPT_KEYS if k in raw]
    if len(given) != 1:
        raise UserError(f"needs exactly one of {', '.join(PROMPT_KEYS)} (got {', '.join(given) or 'none'})")
    key = given[0]
    value = _check_prompt(key, raw[key], base)
    params = {k: _number(k, raw[k], RECORD_PARAMS[k]) for k in RECORD_PARAMS if k in raw}   # floats as floats
    check_params(params, defaults)
    job = {"line": line, "id": raw["id"], key: value, "params": params}
    try:
        pack(job)   # the wire must carry it; never discovered later, in the driver
    except ValueError as e:
        raise UserError(f"record cannot be sent to a replica: {e}") from None
    return job


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def parse_line(raw_line: bytes) -> object:
    """One input line -> its JSON value, or UserError (too long, not UTF-8, malformed, too deep,
    an integer of more digits than Python converts)."""
    if len(raw_line) > MAX_LINE_BYTES:
        raise UserError(f"record of {len(raw_line)} bytes exceeds the {MAX_LINE_BYTES}-byte limit; "
                        "put long prompts in a prompt_file")
    try:
        return json.loads(raw_line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"malformed JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise UserError("JSON nested too deeply; a record is one flat object") from None
    except ValueError as e:   # e.g. an integer literal beyond sys.get_int_max_str_digits
        raise UserError(f"malformed JSON ({str(e).splitlines()[0][:120]})") from None


def record_id(raw: object, line: int) -> str:
    """The record's id, or UserError if it has none usable (the error then carries `<line N>`)."""
    if not isinstance(raw, dict):
        return f"<line {line}>"
    if "id" not in raw:
        raise UserError('record has no "id"')
    job_id = raw["id"]
    if not (isinstance(job_id, str) and job_id):
        raise UserError(f"id {_short(job_id)} must be a non-empty string")
    if not _is_utf8(job_id):
        raise UserError(f"id {ascii(job_id)[:60]} is not valid UTF-8 text (a lone surrogate); send real characters")
    if len(job_id) > MAX_ID_CHARS:
        raise UserError(f"id of {len(job_id)} characters exceeds {MAX_ID_CHARS}")
    return job_id


def read_jobs(path: Path, defaults: RunConfig, data: bytes | None = None) -> tuple[list[dict], list[dict], int]:
    """(jobs, error records, total records) from a JSONL file (or its bytes, read once by the
    caller, which fingerprints the same bytes). Blank lines are skipped; every other line is a
    record. Duplicate ids and an input without records are refused (UserError)."""
    data = read_input(path) if data is None else data
    jobs, errors, seen = [], [], {}
    for line, raw_line in enumerate(data.split(b"\n"), start=1):
        if not raw_line.strip():
            continue
        job_id = f"<line {line}>"   # until the line yields an id of its own
        try:
            raw = parse_line(raw_line)
            job_id = record_id(raw, line)
            jobs.append(check_job(raw, line, path.parent, defaults))
        except UserError as e:
            errors.append(error_record(job_id, line, str(e)))
        seen.setdefault(job_id, []).append(line)
    duplicates = {i: lines for i, lines in seen.items() if len(lines) > 1}
    if duplicates:
        shown = "; ".join(f"{i!r} on lines {', '.join(map(str, lines))}" for i, lines in list(duplicates.items())[:5])
        raise UserError(f"input {str(path)!r} has {len(duplicates)} duplicate id(s): {shown}; ids must be unique")
    total = len(jobs) + len(errors)
    if total == 0:
        raise UserError(f"input {str(path)!r} has no records; expected one JSON object per line, e.g. "
                        '{"id": "a", "prompt": "..."}')
    return jobs, errors, total


def read_input(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"input file {str(path)!r} does not exist") from None
    except OSError as e:
        raise UserError(f"cannot read input file {str(path)!r}: {e.strerror}") from None
