"""Every prompt the project sends to a model, and the parsing of what comes back.

    import prompts
    msgs = prompts.task_prompt(task.code, "cuda")                       # Stages 1-2
    msgs = prompts.task_prompt(task.code, "cuda", [dict(code=a, speedup=0.8),
                                                   dict(code=b, speedup=2.1)])  # Stage 3
    p = prompts.parse_response(text)      # p.code (None when unusable), p.error, p.analysis ...

One template serves all stages: with no exemplars it is the Stage 1/2 prompt; with
exemplars it is CUDA-L1's contrastive prompt (paper section 3.3: earlier variants with their
measured speedups, then performance analysis, algorithm design, code). Pure functions only:
nothing here runs candidate code.
"""
import re
from dataclasses import dataclass

SYSTEM = "You are an expert in GPU and CPU performance engineering who writes fast, correct kernels for PyTorch programs."

# The candidate format of each kernel language (config.LANGUAGES), the one its evaluator builds
# fastest (README: "the candidate format that builds in seconds"); load_inline also works but
# builds 10-30x slower.
FORMAT = {
    "cuda": """Write CUDA C++ without torch headers, with `extern "C"` launchers that take raw pointers, sizes and a trailing `cudaStream_t`, and build it with `lib = kernels.load_cuda(SRC)` (import kernels). Call launchers as `lib.name(tensor, ..., n)`: tensors pass as pointers and the stream is filled in.""",
    "triton": """Write Triton kernels (`import triton`, `import triton.language as tl`, `@triton.jit`) and launch them from `ModelNew.forward` over a grid (`kernel[grid](tensor, ..., n, BLOCK=...)`): tensors pass as pointers; allocate outputs with torch.empty.""",
    "cpp": """Write C++ (OpenMP allowed) without torch headers, with `extern "C"` functions that take raw pointers and sizes, and build it with `lib = kernels.load_cpp(SRC)` (import kernels). Call them as `lib.name(tensor, ..., n)`: tensors pass as pointers.""",
}

RULES = """Rules: define `class ModelNew(nn.Module)` with the same constructor and forward signature as `Model`; same inputs, same output shape and dtype. Keep every size and hyperparameter. Do the work in your own kernels. No caching of results, no side streams, no threads, no lowered precision."""

SECTIONS = ("Performance analysis", "Algorithm design", "Code")


def task_prompt(task_code, language, exemplars=()):
    """Chat messages asking for a faster ModelNew. exemplars: [dict(code, speedup)],
    earlier variants of this task, shown worst first (the contrastive prompt)."""
    parts = [f"Make this PyTorch program faster.\n\n```python\n{task_code.strip()}\n```",
             FORMAT[language], RULES]
    if exemplars:
        shown = sorted(exemplars, key=lambda e: e["speedup"])
        for i, e in enumerate(shown, 1):
            parts.append(f"Variant {i}, measured speedup {e['speedup']:.2f}x over the reference:\n\n"
                         f"```python\n{e['code'].strip()}\n```")
        parts.append("First explain why the faster variant is faster, then design a better algorithm, then write it.")
    parts.append("Answer with three sections: " + ", ".join(f"### {s}" for s in SECTIONS)
                 + " (one ```python block).")
    return [dict(role="system", content=SYSTEM), dict(role="user", content="\n\n".join(parts))]


def completion(code, analysis="", design=""):
    """A response in the requested layout. A solution's module docstring, where present,
    supplies design (its first paragraph) and analysis (the paragraph after 'Analysis:'),
    as the seed solutions in tasks/seeds/ are written."""
    doc, body = split_docstring(code)
    if doc and not (analysis or design):
        head, _, tail = doc.partition("Analysis:")
        design, analysis = head.strip(), tail.strip()
        code = body
    return (f"### {SECTIONS[0]}\n{analysis.strip() or '-'}\n\n### {SECTIONS[1]}\n{design.strip() or '-'}\n\n"
            f"### {SECTIONS[2]}\n```python\n{code.strip()}\n```")


def split_docstring(code):
    """-> (module docstring or "", code without it)."""
    m = re.match(r'\s*(?:"""(.*?)"""|\'\'\'(.*?)\'\'\')[ \t]*\n', code, re.S)
    if not m:
        return "", code
    return (m.group(1) or m.group(2) or "").strip(), code[m.end():]


@dataclass
class Parsed:
    code: str | None       # the solution's source, None when the response has no usable code
    analysis: str = ""
    design: str = ""
    error: str = ""        # "reason: message" when code is None

    @property
    def reason(self):
        """The short key of error (empty, no_code, no_modelnew), as verdicts carry it."""
        return self.error.split(":")[0]


_HEAD = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*|\*\*)?[ \t]*(performance analysis|algorithm design|code)\b[^\n]*$",
                   re.I | re.M)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$", re.M)


def _code_blocks(text):
    """Fenced blocks in order -> [(lang, body, closed)]; an unclosed last fence (a response
    cut at max_new_tokens) yields its text to the end."""
    fences, blocks, i = list(_FENCE.finditer(text)), [], 0
    while i < len(fences):
        start = fences[i]
        if i + 1 < len(fences):
            blocks.append((start.group(1).lower(), text[start.end() + 1:fences[i + 1].start()], True))
            i += 2
        else:
            blocks.append((start.group(1).lower(), text[start.end() + 1:], False))
            i += 1
    return blocks


def parse_response(text):
    """Model response -> Parsed. The code is the last fenced block that defines ModelNew
    (python, unlabeled or unclosed); without fences, the text from the first import line
    when it defines ModelNew. Sections are read by their headings when present."""
    text = (text or "").replace("\r\n", "\n")
    heads = list(_HEAD.finditer(text))
    sections = {}
    for h, nxt in zip(heads, heads[1:] + [None]):
        sections.setdefault(h.group(1).lower(), text[h.end():nxt.start() if nxt else len(text)].strip())
    blocks = _code_blocks(text)
    code = next((b for lang, b, _ in reversed(blocks) if "ModelNew" in b and lang in ("", "python", "py")), None)
    if code is None and not blocks:
        m = re.search(r"^(?:import|from)\s+\w", text, re.M)
        if m and "ModelNew" in text[m.start():]:
            code = text[m.start():]
    if code is None:
        if not text.strip():
            err = "empty: the response is empty"
        elif blocks:
            err = "no_modelnew: no code block defines ModelNew"
        else:
            err = "no_code: the response has no code block"
        return Parsed(None, error=err)
    strip = lambda s: re.sub(r"```\w*\s*", "", s).strip()
    return Parsed(code.strip() + "\n", analysis=strip(sections.get("performance analysis", "")),
                  design=strip(sections.get("algorithm design", "")))


def sections_present(text):
    """How many of the three requested headings a response has (logged in Stage 3)."""
    return len({h.group(1).lower() for h in _HEAD.finditer(text or "")})
