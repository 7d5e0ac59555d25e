"""Typed run configuration: one dataclass per stage, validated at construction.

Presets (`dflash.presets`) are Python functions returning a `RunConfig`; the CLI picks one and
applies `--set section.field=value` overrides through `apply_overrides`, whose errors name the
offending key and value.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field

from harness.runtime.errors import ConfigError

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
ATTENTION_BACKENDS = ("auto", "flex", "sdpa")
LAYER_TYPES = ("full_attention", "sliding_attention")
PRECISIONS = ("fp32", "bf16-autocast")
BATCHING_RULES = ("fixed", "token-budget")


@dataclass(kw_only=True, slots=True)
class DataConfig:
    path: str | None = None
    """Tokenized dataset: a `datasets.save_to_disk` folder, an Arrow IPC file or a Parquet file.
    None = the embedded synthetic corpus, generated on first use under `cache_dir`."""
    cache_dir: str = ".cache/dflash"
    """Where the embedded synthetic corpus is written (atomically) and reused."""
    synthetic_samples: int = 768
    synthetic_seed: int = 0
    synthetic_min_len: int = 24
    synthetic_max_len: int = 120
    synthetic_prompt_quantum: int = 4
    """Prompt lengths are multiples of this. The target batches only equal-length prompts, so the
    number of distinct lengths sets the number of generate calls: long GPU corpora use a coarse
    quantum (a 768-token corpus at 4 meant ~90 small calls, minutes on an H200)."""
    synthetic_generate_batch: int = 32
    """Prompts per batched greedy `generate` call (GPU presets use more)."""
    synthetic_pack_len: int = 0
    """0 = one sample per row. N > 0: consecutive samples of the synthetic corpus are packed into
    rows of at most N tokens with a `doc_ids` column (dflash.data.pack_documents), so the run
    trains on packed documents; N must hold the longest sample and fit the largest bucket."""
    bucket_boundaries: tuple[int, ...] = (32, 64, 128)
    """Upper bounds (inclusive) of the length buckets; a longer sample is a bad-input error."""
    token_budget: int = 1024
    """Tokens per batch. batching=fixed: padded tokens, batch size in a bucket = token_budget //
    bucket bound; batching=token-budget: the real lengths of a batch's rows sum to at most this."""
    batching: str = "fixed"
    """How a bucket is cut into batches (dflash.buckets): fixed (one batch size per bucket) or
    token-budget (rows filled by their real lengths, so batch sizes follow the data and the shuffle)."""
    max_batch_rows: int = 64
    """Most rows of a token-budget batch (the seeds' trainer capped its batches at 64); fixed ignores it."""
    min_loss_tokens: int = 8
    """Samples with fewer supervised tokens are dropped (SpecForge drops < 2 * block_size)."""
    shuffle_seed: int = 0
    heldout_samples: int = 16
    """Samples kept out of training, used as prompts for the tau evaluation."""

    def __post_init__(self) -> None:
        if not self.bucket_boundaries or list(self.bucket_boundaries) != sorted(set(self.bucket_boundaries)):
            raise ConfigError(f"data.bucket_boundaries must be strictly increasing, got {self.bucket_boundaries}")
        if self.bucket_boundaries[0] <= 0:
            raise ConfigError("data.bucket_boundaries must be positive")
        if self.token_budget < self.bucket_boundaries[-1]:
            raise ConfigError(
                f"data.token_budget ({self.token_budget}) must hold at least one sample of the largest "
                f"bucket ({self.bucket_boundaries[-1]})"
            )
        if self.batching not in BATCHING_RULES:
            raise ConfigError(f"data.batching must be one of {BATCHING_RULES}, got {self.batching!r}")
        if self.max_batch_rows < 1:
            raise ConfigError(f"data.max_batch_rows must be >= 1, got {self.max_batch_rows}")
        if self.synthetic_min_len > self.synthetic_max_len:
            raise ConfigError("data.synthetic_min_len must be <= data.synthetic_max_len")
        if self.synthetic_prompt_quantum < 1 or self.synthetic_generate_batch < 1:
            raise ConfigError("data.synthetic_prompt_quantum and data.synthetic_generate_batch must be >= 1")
        pack = self.synthetic_pack_len
        if pack and not self.synthetic_max_len <= pack <= self.bucket_boundaries[-1]:
            raise ConfigError(
                f"data.synthetic_pack_len ({pack}) must be 0 or between data.synthetic_max_len "
                f"({self.synthetic_max_len}) and the largest bucket ({self.bucket_boundaries[-1]})"
            )


@dataclass(kw_only=True, slots=True)
class TargetConfig:
    path: str | None = None
    """Local HF causal-LM folder (no network). None = the embedded tiny random model below."""
    arch: str = "llama"
    """Embedded target family: 'llama' or 'qwen3'."""
    impl: str = "transformers"
    """Who builds the embedded target: 'transformers' (its LlamaForCausalLM / Qwen3ForCausalLM) or
    'native' (dflash.llama: the same seeded Llama in plain torch, without transformers' import)."""
    hidden_size: int = 64
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    vocab_size: int = 256
    max_position_embeddings: int = 1024
    init_seed: int = 0
    dtype: str = "float32"
    """float32 or bfloat16 (GPU presets)."""
    cudnn_attention: bool = False
    """Let SDPA use cuDNN's attention on CUDA (process-wide, set before any thread starts). Off,
    a bf16 causal attention takes FlashAttention: cuDNN's builds a plan per shape and its kernels
    are compiled by the driver on a host's first run (dflash.train)."""

    def __post_init__(self) -> None:
        if self.arch not in ("llama", "qwen3"):
            raise ConfigError(f"target.arch must be 'llama' or 'qwen3', got {self.arch!r}")
        if self.impl not in ("transformers", "native"):
            raise ConfigError(f"target.impl must be 'transformers' or 'native', got {self.impl!r}")
        if self.impl == "native" and (self.arch != "llama" or self.path is not None):
            raise ConfigError("target.impl=native builds the embedded llama only (no target.path, no qwen3)")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"target.dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.hidden_size % self.num_heads:
            raise ConfigError("target.hidden_size must be divisible by target.num_heads")


@dataclass(kw_only=True, slots=True)
class DrafterConfig:
    num_layers: int = 1
    block_size: int = 4
    num_anchors: int = 8
    """Anchors per sequence (blocks per row); rows with fewer valid anchors carry a keep-mask."""
    gamma: float | None = None
    """Position-decay constant of the loss; None = 7 for B=16, 5 for B=10, 4 for B=8, else B/2."""
    mask_token_id: int | None = None
    """Must exist in the target embedding; None = last id of the target vocabulary."""
    target_layer_ids: tuple[int, ...] | None = None
    """Tapped target layers; None = DFlash's rule (middle layer for 1 draft layer, else uniform 1..N-3)."""
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention: str = "auto"
    """auto = flex_attention on CUDA, dense SDPA mask on CPU (flex backward is CUDA-only)."""
    init_seed: int = 0
    layer_types: tuple[str, ...] | None = None
    """Per draft layer, full_attention or sliding_attention (the `layer_types` of DFlash
    checkpoints); None = every layer full_attention."""
    sliding_window: int | None = None
    """Window of the sliding_attention layers, in positions: a query at position p sees keys at
    positions within p - (window - 1) .. p + (window - 1) (the config field of Qwen3/z-lab)."""

    def __post_init__(self) -> None:
        if self.block_size < 2:
            raise ConfigError("drafter.block_size must be >= 2")
        if self.num_anchors < 1 or self.num_layers < 1:
            raise ConfigError("drafter.num_anchors and drafter.num_layers must be >= 1")
        if self.attention not in ATTENTION_BACKENDS:
            raise ConfigError(f"drafter.attention must be one of {ATTENTION_BACKENDS}, got {self.attention!r}")
        if self.layer_types is not None and (
            len(self.layer_types) != self.num_layers or not set(self.layer_types) <= set(LAYER_TYPES)
        ):
            raise ConfigError(
                f"drafter.layer_types must name one of {LAYER_TYPES} per layer "
                f"({self.num_layers}), got {self.layer_types}"
            )
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ConfigError(f"drafter.sliding_window must be >= 1, got {self.sliding_window}")
        if "sliding_attention" in (self.layer_types or ()) and self.sliding_window is None:
            raise ConfigError("drafter.layer_types has sliding_attention layers: set drafter.sliding_window")

    def resolved_gamma(self) -> float:
        if self.gamma is not None:
            return self.gamma
        # DFlash paper Eq. 4 as quoted by SpecForge train_dflash.py: 7 for B=16, 5 for 10, 4 for 8.
        return {16: 7.0, 10: 5.0, 8: 4.0}.get(self.block_size, self.block_size / 2)


@dataclass(kw_only=True, slots=True)
class CompileConfig:
    mode: str = "none"
    """Drafter step: none (eager) | default | reduce-overhead | max-autotune-no-cudagraphs | max-autotune."""
    backend: str = "inductor"
    """torch.compile backend (inductor, aot_eager, eager); cudagraph modes need inductor."""
    compile_target: bool = False
    """Also compile the target forward (mode default)."""
    dynamic: bool | None = None
    inductor_workarounds: bool = True
    """Pass step.INDUCTOR_WORKAROUNDS (known compiler bugs, not races) to inductor."""
    cache_artifacts: str | None = None
    """A file of torch's portable compile caches (torch.compiler.save_cache_artifacts): loaded
    before the first compile when it exists, rewritten after training; carries compiled kernels
    to a fresh host (dflash.compile_cache)."""

    @property
    def cache_file(self) -> str | None:
        """cache_artifacts where the drafter step compiles (an eager run has nothing to carry)."""
        return self.cache_artifacts if self.mode != "none" else None

    @property
    def cudagraphs(self) -> bool:
        """Whether the drafter step's outputs live in a CUDA-graph pool (modes that record)."""
        return self.mode in ("reduce-overhead", "max-autotune")

    def __post_init__(self) -> None:
        if self.mode not in COMPILE_MODES:
            raise ConfigError(f"compile.mode must be one of {COMPILE_MODES}, got {self.mode!r}")


@dataclass(kw_only=True, slots=True)
class PipelineConfig:
    num_prefetch_threads: int = 1
    num_target_threads: int = 1
    num_drafter_threads: int = 1
    queue_depth: int = 4
    """Capacity of each bounded channel (backpressure)."""
    poll_s: float = 0.1
    """put/get timeout: how often a blocked stage re-checks the stop event."""
    startup_timeout_s: float = 900.0
    """How long producers wait at the startup gate for every drafter thread to be ready."""
    shutdown_deadline_s: float = 10.0
    """Join deadline per thread on shutdown; a thread still alive after it is reported."""

    def __post_init__(self) -> None:
        for name in ("num_prefetch_threads", "num_target_threads", "num_drafter_threads", "queue_depth"):
            if getattr(self, name) < 1:
                raise ConfigError(f"pipeline.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(kw_only=True, slots=True)
class DeviceConfig:
    target_devices: tuple[str, ...] = ("cpu",)
    """Devices of the target threads, assigned round-robin (e.g. cuda:0,cuda:1,...)."""
    drafter_devices: tuple[str, ...] = ("cpu",)
    """Devices of the drafter threads, assigned round-robin; replicas stay in lockstep."""
    remap: bool = False
    """Map cuda:i onto cuda:(i % device_count), so a multi-GPU plan runs on fewer GPUs."""


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    steps: int = 120
    """Optimizer steps; each step consumes num_drafter_threads batches (one per replica)."""
    lr: float = 3e-3
    warmup_ratio: float = 0.04
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    out_dir: str = "runs/default"
    checkpoint_every: int = 0
    """Steps between checkpoints (0 = only at the end and on SIGINT/SIGTERM)."""
    resume: bool = False
    log_interval_s: float = 5.0
    progress: bool = True
    eval_prompts: int = 8
    eval_new_tokens: int = 32
    nan_check: bool = True
    """A NaN/inf loss ends the run as a wrong result (exit 3)."""
    oracle_every: int = 0
    """Differential oracle (dflash.oracle): on steps 0, N, 2N, ... every drafter thread recomputes
    its batch eagerly under no_grad and a disagreement with the compiled step ends the run as a
    wrong result (exit 3); 0 = off. Costs one eager forward per checked step and thread."""
    oracle_rtol: float = 1e-4
    """Relative loss tolerance of the oracle. On clean CPU runs (torch 2.13, 7,360 checks with
    inductor, 8,320 with aot_eager, 7,360 eager) compiled and eager losses differed by at most
    7.4e-7 relative (3.3e-6 absolute, losses 4-5.5) with inductor and not at all otherwise: 1e-4
    leaves a margin over 100x (docs/log/2026-12-02-loss-oracle.md). CPU only: a CUDA step
    compiles flex attention where the eager one runs SDPA, so a GPU run needs its own figure."""
    oracle_atol: float = 1e-5
    """Absolute loss tolerance of the oracle, which decides for a loss near 0 (3x the largest
    absolute difference measured); at a loss near 5 rtol allows 5e-4."""
    oracle_flips: int = 2
    """Greedy hits per step that may differ from eager: none did in those runs; two allow an
    argmax near-tie that a compiled kernel rounds the other way."""
    stop_at_step: int = 0
    """Stop cleanly (checkpoint, final line) once this many steps are done, keeping the schedule
    of train.steps; 0 = run to train.steps. For time-sliced jobs and the bit-exact resume test."""
    export: bool = True
    """Export the trained drafter (z-lab HF layout) into out_dir/export at the end."""
    stall_s: float = 300.0
    """Watchdog (dflash.watchdog): no optimizer step for this long -> every thread's stack in
    out_dir/stall-dump.txt, one headline line saying where each thread is, exit 4; 0 = off.
    Longer than any hang limit of the harness's presets (hang_s <= 240 s), so that under the
    harness its own hang detection still decides how a trial ended."""
    first_step_stall_s: float = 900.0
    """The allowance until this run's first step, which holds the first compiles, warm-up and
    CUDA-graph recording (a cold Inductor cache took 80 s at step 1 on one H200 with three
    drafter threads); as pipeline.startup_timeout_s. 0 = the first step is not watched."""

    precision: str = "fp32"
    """fp32, or bf16-autocast: the drafter forward and LM head run under torch.autocast(bfloat16)
    while parameters, gradients and optimizer state stay float32 (the master weights); the loss
    is computed in float32 either way."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"train.precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.steps < 1:
            raise ConfigError(f"train.steps must be >= 1, got {self.steps}")
        if self.stall_s < 0 or self.first_step_stall_s < 0:
            raise ConfigError("train.stall_s and train.first_step_stall_s must be >= 0 (0 = off)")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError("train.warmup_ratio must be in [0, 1)")
        if self.oracle_every < 0 or self.oracle_flips < 0:
            raise ConfigError("train.oracle_every and train.oracle_flips must be >= 0 (oracle_every 0 = off)")
        if not (self.oracle_rtol >= 0 and self.oracle_atol >= 0):
            raise ConfigError("train.oracle_rtol and train.oracle_atol must be >= 0")


@dataclass(kw_only=True, slots=True)
class RunConfig:
    preset: str = "custom"
    data: DataConfig = field(default_factory=DataConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    drafter: DrafterConfig = field(default_factory=DrafterConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    fixes: tuple[str, ...] = ()
    """Names from harness.runtime.fixes.FIXES; () or ('none',) = raw; 'recommended' = the measured set for
    the installed torch, the plan's device kind and the compile mode (resolved by the trainer,
    which then stores the resolved names here)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _convert(raw: str, tp: object, where: str) -> object:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if raw.lower() in ("none", "null", ""):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _convert(raw, inner[0], where)
    if origin is tuple:
        item = args[0]
        parts = [p for p in raw.split(",") if p.strip()]
        return tuple(_convert(p.strip(), item, where) for p in parts)
    if tp is bool:
        low = raw.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"invalid boolean {raw!r} for {where}")
    if tp in (int, float, str):
        try:
            return tp(raw)
        except ValueError:
            raise ConfigError(f"invalid {tp.__name__} {raw!r} for {where}") from None
    raise ConfigError(f"cannot set {where} from the command line")


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Return a new RunConfig with `section.field=value` overrides applied and re-validated."""
    sections = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    top: dict[str, object] = {}
    changed: dict[str, dict[str, object]] = {}
    hints_top = typing.get_type_hints(RunConfig)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not key=value")
        where = f"--set {key}"
        if "." not in key:
            if key not in hints_top or dataclasses.is_dataclass(sections.get(key)):
                raise ConfigError(f"unknown config key {key!r}")
            top[key] = _convert(raw, hints_top[key], where)
            continue
        sec_name, _, fname = key.partition(".")
        sec = sections.get(sec_name)
        if not dataclasses.is_dataclass(sec):
            raise ConfigError(f"unknown config section {sec_name!r} in {key!r}")
        hints = typing.get_type_hints(type(sec))
        if fname not in hints:
            raise ConfigError(f"unknown config key {key!r}")
        changed.setdefault(sec_name, {})[fname] = _convert(raw, hints[fname], where)
    new_sections = {name: dataclasses.replace(sections[name], **vals) for name, vals in changed.items()}
    return dataclasses.replace(cfg, **new_sections, **top)


def from_dict(d: dict) -> RunConfig:
    """Inverse of RunConfig.to_dict (used by checkpoints and the harness spec)."""
    kwargs: dict[str, object] = {}
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        if f.name not in d:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            sub_hints = typing.get_type_hints(tp)
            vals = {}
            for k, v in d[f.name].items():
                if k not in sub_hints:
                    raise ConfigError(f"unknown config key {f.name}.{k}")
                vals[k] = tuple(v) if isinstance(v, list) else v
            kwargs[f.name] = tp(**vals)
        else:
            kwargs[f.name] = tuple(d[f.name]) if isinstance(d[f.name], list) else d[f.name]
    return RunConfig(**kwargs)
