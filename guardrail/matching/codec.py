"""Compact, safe serialisation of an :class:`~guardrail.matching.artefact.Artefact` (no pickle).

Layout: ``MAGIC`` · ``uint32`` header length (little endian) · UTF-8 JSON header · raw array bytes.
The header carries the format and compiler versions, the content key, the vocab fingerprint, the term
tables (a regex term with its flag: its DFA is rebuilt from the pattern on decoding, deterministically,
and the node counts recorded here must come out the same) and, per array, its dtype/shape/offset; a
sha256 of the array bytes guards against corruption.
Decoding only ever calls ``json.loads`` and ``numpy.frombuffer`` with dtypes from a fixed allow-list, so
a blob from a shared cache can be wrong but never executed (docs/design.md, known traps).
"""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from guardrail.matching.artefact import Artefact, RootSweep
from guardrail.matching.obfuscation import Obfuscation
from guardrail.matching.obfuscation.automaton import ObfuscationAutomaton
from guardrail.matching.obfuscation.nfa import ObfuscationNfa
from guardrail.matching.term_spec import AllowSpec, TermSpec
from guardrail.matching.vocab import TokenVocab
from guardrail.wordlists.wordlist import MatchMode

MAGIC = b"GUARDRAIL-ARTEFACT\n"
#: 2: terms carry a regex flag; ``regex_nodes`` lists the node count of each regex stream.
#: 3: terms carry their effective obfuscation level; each obfuscation stream's NFA is stored as arrays
#: ``obfuscation<i>.<part>`` (its DFA builds lazily from it, so no node count is recorded for it).
#: 4: the sweep's per-stream arrays hold the swept streams only: an obfuscation stream's rows are all zero
#: (never swept: ``Artefact.sweep_root``) and are rebuilt on decoding (with two obfuscation streams over a
#: 262k vocab they were 4.7 MB of zeros to send, hash and copy on every warm load).
#: 5: an obfuscation stream's NFA records the characters its threads read without counting
#: (``obfuscation<i>.uncounted``: stretch and joint marks, combining marks, emphasis markers).
FORMAT_VERSION = 5
_DTYPES = {"int32", "int64", "uint8"}
_ARRAYS = ("node", "symbols", "flags", "pending_bytes", "always_banned")
#: The sweep's arrays with one row per stream (``RootSweep``).
_PER_STREAM = ("node", "symbols", "flags")


class ArtefactFormatError(ValueError):
    """A blob is not a valid artefact for this vocab/key (corrupt, foreign, or from another version)."""


def encode_artefact(artefact: Artefact, key: str, compiler_version: int) -> bytes:
    """Serialise ``artefact`` under its content ``key``; returns the blob (bytes)."""
    arrays, payload, offset = {}, [], 0
    viewed = [a for a in artefact.automata if isinstance(a, ObfuscationAutomaton)]
    swept = len(artefact.automata) - len(viewed)  # the obfuscation streams come last
    named = [(name, getattr(artefact.sweep, name)[:swept] if name in _PER_STREAM else getattr(artefact.sweep, name))
             for name in _ARRAYS]
    for index, automaton in enumerate(viewed):
        named += [(f"obfuscation{index}.{part}", array) for part, array in automaton.nfa.to_arrays().items()]
    for name, array in named:
        array = np.ascontiguousarray(array)
        data = array.tobytes()
        arrays[name] = {"dtype": str(array.dtype), "shape": list(array.shape), "offset": offset, "nbytes": len(data)}
        payload.append(data)
        offset += len(data)
    body = b"".join(payload)
    header = {
        "format": FORMAT_VERSION,
        "compiler_version": compiler_version,
        "key": key,
        "vocab_fingerprint": artefact.vocab.fingerprint,
        "vocab_size": len(artefact.vocab.token_bytes),
        "terms": [[t.list_name, t.text, t.normalized, t.match.value, t.case_sensitive, t.regex, str(t.obfuscation)]
                  for t in artefact.terms],
        "regex_nodes": _regex_nodes(artefact),
        "allows": [[a.text, a.normalized, a.case_sensitive] for a in artefact.allows],
        "arrays": arrays,
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    raw = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(raw)) + raw + body


def _regex_nodes(artefact: Artefact) -> list[int]:
    """Node count of each regex stream: the sweep stores their node ids, which must mean the same nodes."""
    return [a.num_nodes for a in artefact.automata if a.regex and not getattr(a, "obfuscation", False)]


def decode_artefact(blob: bytes, vocab: TokenVocab, key: str, compiler_version: int) -> Artefact:
    """Rebuild an artefact from ``blob`` for ``vocab``.

    Raises:
        ArtefactFormatError: wrong magic, truncated or corrupted data, a checksum mismatch, another
            format or compiler version, another key, or another vocab.
    """
    try:
        if not blob.startswith(MAGIC):
            raise ArtefactFormatError("not an artefact (bad magic)")
        (size,) = struct.unpack_from("<I", blob, len(MAGIC))
        start = len(MAGIC) + 4
        header = json.loads(blob[start:start + size].decode())
        body = memoryview(blob)[start + size:]
        expected = {"format": FORMAT_VERSION, "compiler_version": compiler_version, "key": key,
                    "vocab_fingerprint": vocab.fingerprint, "vocab_size": len(vocab.token_bytes)}
        for field, value in expected.items():
            if header.get(field) != value:
                raise ArtefactFormatError(f"{field} is {header.get(field)!r}, expected {value!r}")
        if hashlib.sha256(body).hexdigest() != header["sha256"]:
            raise ArtefactFormatError("checksum mismatch (corrupted blob)")
        arrays: dict[str, np.ndarray] = {}
        nfa_arrays: dict[int, dict[str, np.ndarray]] = {}
        for name, spec in header["arrays"].items():
            if spec["dtype"] not in _DTYPES:
                raise ArtefactFormatError(f"array {name} has dtype {spec['dtype']!r}")
            chunk = body[spec["offset"]:spec["offset"] + spec["nbytes"]]
            array = np.frombuffer(chunk, dtype=spec["dtype"]).reshape(spec["shape"])
            if name in _ARRAYS:
                arrays[name] = array
            else:  # obfuscation<i>.<part>
                stream, _, part = name.partition(".")
                nfa_arrays.setdefault(int(stream.removeprefix("obfuscation")), {})[part] = array
        if set(arrays) != set(_ARRAYS):
            raise ArtefactFormatError(f"arrays {sorted(set(_ARRAYS) - set(arrays))} missing")
        for name in _PER_STREAM:  # the obfuscation streams' zero rows after the swept ones
            stored = arrays[name]
            if stored.ndim != 2:
                raise ArtefactFormatError(f"array {name} has shape {stored.shape}")
            full = np.zeros((len(stored) + len(nfa_arrays), stored.shape[1]), dtype=stored.dtype)
            full[:len(stored)] = stored
            arrays[name] = full
        for name in ("pending_bytes", "always_banned"):
            arrays[name] = arrays[name].copy()  # writable, apart from the blob
        nfas = [ObfuscationNfa.from_arrays(nfa_arrays[i]) for i in range(len(nfa_arrays))]
        levels = {obf: Obfuscation.parse(obf) for obf in {t[6] for t in header["terms"]}}  # a few settings
        modes = {match: MatchMode(match) for match in {t[3] for t in header["terms"]}}
        terms = [TermSpec(i, lst, text, norm, modes[match], bool(cs), bool(regex), levels[obf])
                 for i, (lst, text, norm, match, cs, regex, obf) in enumerate(header["terms"])]
        allows = [AllowSpec(text, norm, bool(cs)) for text, norm, cs in header["allows"]]
        sweep = RootSweep(**arrays)
        artefact = Artefact(vocab, terms, allows, sweep=sweep, obfuscation_nfas=nfas)
        if sweep.node.shape != (len(artefact.automata), len(vocab.token_bytes)):
            raise ArtefactFormatError(f"sweep shape {sweep.node.shape} does not fit the terms and vocab")
        if _regex_nodes(artefact) != header["regex_nodes"]:
            raise ArtefactFormatError(f"regex automata rebuilt with {_regex_nodes(artefact)} nodes, "
                                      f"stored with {header['regex_nodes']}")
        return artefact
    except ArtefactFormatError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ArtefactFormatError(f"malformed artefact: {exc}") from exc
