"""gpt-fast-style peer: the ReferenceEngine's decode step captured once in a CUDA graph.

The strongest plain-PyTorch baseline: one graph replay per token, no Python per layer. The
graph reads the token from a static input tensor, runs the step (static KV cache with a
position mask, so shapes never change), takes the argmax on the device and writes it back
into the input tensor, so `decode` is `replay()` + one tiny copy per token and never syncs
with the host. Teacher forcing and prefill overwrite the input tensor before each replay.

Cost of fixed shapes: attention reads the whole cache capacity every step (gpt-fast does the
same), so the capacity is sized for the benchmark (prompt + 256, sweep to 2048 + windows).
"""
from __future__ import annotations

import torch

from monolith.engine import Engine
from monolith.errors import MonolithError

GRAPH_CONTEXT_CAP = 2304   # >= 2048 + sweep windows (3 x 32); smaller = less KV read per step
KERNEL_GAP_US = 1.0        # ASSUMED cost of one dependent kernel boundary inside a graph (not measured)


class GraphEngine(Engine):
    name = "reference-graph"

    def __init__(self, ckpt, device="cuda", dtype=torch.bfloat16, compute_dtype=None,
                 context_cap: int = GRAPH_CONTEXT_CAP, mutate=None):
        from monolith.reference import ReferenceEngine

        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise MonolithError("reference-graph needs a CUDA device (it captures a CUDA graph)")
        self.ref = ReferenceEngine(ckpt, device=self.device, dtype=dtype, compute_dtype=compute_dtype,
                                   context_cap=context_cap, graph_safe=True)
        if mutate is not None:  # negative controls: a deliberately wrong model, before capture
            mutate(self.ref)
        self.context_cap = context_cap
        self.vocab_size = self.ref.shape.vocab
        self.tok_in = torch.zeros(1, dtype=torch.long, device=self.device)
        self.position = 0
        self.info = {**self.ref.info, "graph": "torch.cuda.CUDAGraph, one replay per token",
                     "attention_reads_positions": context_cap}
        self._capture()
        self.info.update(self._kernel_model())

    @torch.inference_mode()
    def _body(self) -> None:
        self.logits_out = self.ref.step_tensor(self.tok_in)
        self.next_tok = torch.argmax(self.logits_out).view(1)
        self.tok_in.copy_(self.next_tok)

    @torch.inference_mode()
    def _capture(self) -> None:
        # Warm up on a side stream (allocator + lazy cuBLAS init), as PyTorch's graph docs require.
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            for _ in range(3):
                self._body()
        torch.cuda.current_stream(self.device).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._body()
        self.reset()

    def _kernel_model(self) -> dict:
        """Count kernels in one eager step (profiler): each dependent kernel boundary is this
        engine's 'sync' in the time model. Best effort; absent if the profiler is unavailable."""
        try:
            from torch.profiler import ProfilerActivity, profile

            with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
                self.ref.step_tensor(self.tok_in)
                torch.cuda.synchronize(self.device)
            n = sum(1 for e in prof.events() if getattr(e, "device_type", None) is not None
                    and "cuda" in str(e.device_type).lower())
            self.reset()
            if n <= 0:
                return {}
            return {"kernels_per_token": n, "syncs_per_layer": n / self.ref.shape.num_layers,
                    "sync_us": KERNEL_GAP_US, "sync_note": f"kernel boundaries; {KERNEL_GAP_US} µs each is assumed"}
        except Exception as e:  # noqa: BLE001  (profiling is optional)
            self.reset()
            return {"kernel_count_error": str(e)[:200]}

    def reset(self) -> None:
        self.ref.reset()
        self.position = 0

    # Engine's public methods check token ids and room, then call these with an int64 CPU tensor.
    @torch.inference_mode()
    def _prefill(self, tokens: torch.Tensor) -> int:
        t = tokens.to(self.device)
        for j in range(t.numel()):
            self.tok_in.copy_(t[j:j + 1])
            self.graph.replay()
        self.position += t.numel()
        return int(self.next_tok)

    @torch.inference_mode()
    def _decode(self, first_token: int, n: int) -> torch.Tensor:
        out = torch.empty(n, dtype=torch.long, device=self.device)
        self.tok_in.fill_(int(first_token))
        for j in range(n):
            self.graph.replay()          # leaves its argmax in tok_in for the next replay
            out[j:j + 1].copy_(self.next_tok)
        self.position += n
        return out

    @torch.inference_mode()
    def _teacher_forced(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.to(self.device)
        out = torch.empty(t.numel(), dtype=torch.long, device=self.device)
        for j in range(t.numel()):
            self.tok_in.copy_(t[j:j + 1])
            self.graph.replay()
            out[j:j + 1].copy_(self.next_tok)
        self.position += t.numel()
        return out

    @torch.inference_mode()
    def _logits(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.to(self.device)
        out = torch.empty(t.numel(), self.ref.shape.vocab, dtype=torch.float32, device=self.device)
        for j in range(t.numel()):
            self.tok_in.copy_(t[j:j + 1])
            self.graph.replay()
            out[j].copy_(self.logits_out)
        self.position += t.numel()
        return out

    def bytes_per_token(self, position: int) -> int:
        return self.ref.bytes_per_token(position)
