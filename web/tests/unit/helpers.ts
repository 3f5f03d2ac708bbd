// A small valid page trace (FORMAT.md v1) for the unit tests, built in code.
export function tinyTrace(): Record<string, any> {
  return {
    format: "monolith-xray", version: 1,
    meta: { variant: "t", gpu: "test", sm_count: 4, blocks: 2, position: 0, token_time_us: 1.2 },
    phases: [
      { id: 0, name: "qkv", kind: "work", scope: "layer", color: "#4e79a7" },
      { id: 1, name: "bar_qkv", kind: "wait", scope: "layer", color: "#8c8c8c" },
      { id: 2, name: "attn", kind: "work", scope: "layer", color: "#f28e2b" },
      { id: 3, name: "lmhead", kind: "work", scope: "token", color: "#af7aa1" },
    ],
    blocks: [{ block: 0, sm: 2 }, { block: 1, sm: 0 }],
    events: {
      // block 0: qkv 0-400, wait 400-500, attn 500-700, lmhead 700-1000
      // block 1: qkv 0-300, wait 300-500, lmhead 500-900
      block: [0, 0, 0, 0, 1, 1, 1],
      phase: [0, 1, 2, 3, 0, 1, 3],
      layer: [0, 0, 0, 1, 0, 0, 1],
      start_ns: [0, 400, 500, 700, 0, 300, 500],
      dur_ns: [400, 100, 200, 300, 300, 200, 400],
    },
  };
}
