// The engine: runs one step of the model over a ragged batch — several
// sequences, each contributing a chunk of consecutive tokens at its own
// position (prefill chunks and single decode tokens mixed) — against a paged
// KV cache, on a device (device.h): the host device (CPU kernels of
// cpu_worker/ops) unless EngineOptions names another.
#ifndef TANDEM_GPU_WORKER_ENGINE_ENGINE_H_
#define TANDEM_GPU_WORKER_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/checkpoint.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/linear.h"
#include "gpu_worker/engine/all_reduce.h"
#include "gpu_worker/engine/attention_offload.h"
#include "gpu_worker/engine/copy_engine.h"
#include "gpu_worker/engine/device.h"
#include "gpu_worker/engine/expert_cache.h"
#include "gpu_worker/engine/expert_offload.h"
#include "gpu_worker/engine/kv_cache.h"
#include "gpu_worker/engine/model_weights.h"
#include "gpu_worker/engine/weight_pager.h"
#include "cpu_worker/kv/huge_page_array.h"

namespace tandem {

struct EngineOptions {
  ops::ComputeType compute = ops::ComputeType::kBF16;  // honoured for bf16 checkpoints only
  // Makes the device activations, KV and resident weights live on and the
  // ops run on; the engine owns it (null: the host device). On a device
  // without host memory (CUDA) the expert and attention offloads' rows go
  // through host copies,
  // streamed FFN weights must be bf16 or f32 (the device computes the
  // staged bytes in place), and tensor_parallel must sum device memory.
  DeviceFactory device;
  int64_t max_context = 0;   // tokens per sequence; 0 = min(model max, 8192)
  int64_t max_sequences = 4;  // sequences whose KV fits at full context at once
  int64_t block_size = 16;
  // Tensor parallelism (not owned; null = a single rank): this engine holds
  // rank tensor_parallel->rank()'s slice of the weights and KV heads
  // (tensor_parallel.h) and sums partial outputs through it. Every rank of
  // the group must run the same Steps with the same batches. Expert and
  // attention offloads do not combine with it yet (FailedPrecondition).
  AllReduce* tensor_parallel = nullptr;
  // Bytes of weights the device keeps resident (0: all of them). The FFN
  // weights (dense MLP, or routed and shared experts) of the layers past
  // it, from the last layer backwards, stay in host memory and are streamed
  // page by page into a double-buffered staging area just before use
  // (weight_pager.h; ScheInfer's CG part). On the host device the copies are
  // real memcpys, so the paging runs, and is tested, without a GPU.
  int64_t weight_budget_bytes = 0;
  // The layers whose FFN weights are streamed, as a policy names them (its
  // CG layers); when given, weight_budget_bytes is not consulted.
  std::vector<int64_t> streamed_ffn_layers;
  int64_t stream_page_bytes = int64_t{1} << 20;
  // Per layer, the routed experts an expert offload computes: their weights
  // are not loaded here (a cpu_worker holds them). Steps then need an
  // offload that claims exactly these (FailedPrecondition otherwise).
  std::vector<std::vector<int32_t>> remote_experts;
  // ScheInfer's CC part: per layer, the last intermediate rows of a dense
  // MLP computed on the CPU (from host memory, on a thread of this process
  // while the device computes the rest; the partial outputs are summed).
  // Empty or 0: the whole MLP on the device. Single rank only.
  std::vector<int64_t> cpu_ffn_rows;
  // ScheInfer's prefill token assignment n_g: in a step that holds a
  // prefill (a chunk of more than one token), the CC rows of the step's
  // first n_g rows run on the device from a copy of the CC weights made for
  // the step (the paper's CG'), the rest on the CPU as in decode; decode-only
  // steps keep n_g = 0. Needs cpu_ffn_rows.
  int64_t prefill_gpu_tokens = 0;
  // The GPU expert cache (expert_cache.h; capacity 0: off): routed experts
  // stay in host memory, `capacity_per_layer` of each layer's live in
  // device slots chosen by HybriMoE's score cache and Klotski's prefetch,
  // and each step splits the activated experts between the device and the
  // expert offload (which must compute any expert; without one the engine
  // computes the CPU's share itself, on its own thread). Does not combine
  // with remote_experts, tensor parallelism or FFN streaming of MoE layers.
  ExpertCacheOptions expert_cache;
  // MoE-Lightning's micro-batch size mu (CGOPipe): a step of more sequences
  // runs as micro-batches of this many consecutive chunks, pipelined per
  // layer so that the attention offload (CPU attention) of one micro-batch
  // overlaps the device's work on its neighbours (Engine::RunLayer). 0: the
  // whole step is one micro-batch. Does not combine with the expert cache,
  // whose per-layer plan covers all of a step's tokens at once (Klotski's n
  // batches sharing every loaded expert).
  int64_t micro_batch_size = 0;
  // Memory the load may take for packed copies of bf16 weights (the host
  // device's ops::WeightLayout::kCpuPacked); -1 asks the machine
  // (AvailableMemoryBytes, common/host_memory.h). Where the copies would
  // take more than 90 % of it, the weights stay where the model file maps
  // them (decode of many sequences then runs slower, but a model that fits
  // only as its file's page cache still loads), and load_notice() says so.
  int64_t available_memory_bytes = -1;
};

// One sequence's part of a step.
struct SequenceChunk {
  int64_t seq_id = 0;
  std::vector<int32_t> tokens;  // this step's tokens, at positions start_pos...
  int64_t start_pos = 0;        // must not exceed the tokens already in the cache
  bool all_logits = false;      // logits for every token (scoring), else the last only
  // Attention and KV on the attention offload (Neo's CPU attention) instead
  // of the engine's own cache. A sequence keeps its placement until freed.
  bool cpu_attention = false;
  // The caller takes only the argmax of the last row and its log-prob
  // (greedy decoding, or a prompt chunk that samples nothing). When every
  // chunk of a step says so and none wants all_logits, a device without
  // host memory picks on the device and the step returns greedy_ids and
  // greedy_logprobs instead of logits: two numbers per row over the link
  // instead of the vocabulary.
  bool greedy_only = false;
  // The sequence's KV blocks, chosen by the caller (the coordinator's
  // scheduler, which shares blocks between sequences for prefix caching);
  // empty: the engine's cache allocates. An engine follows callers' tables
  // or allocates itself, not both at once (KvCache::Adopt).
  std::vector<int32_t> block_table;
  // Positions [0, shared_prefix_tokens) are in block_table's blocks already,
  // written for another sequence: this one starts there without having run
  // them (start_pos == shared_prefix_tokens).
  int64_t shared_prefix_tokens = 0;
};

struct StepResult {
  std::vector<float> logits;        // [rows, vocab]; empty when greedy_ids is not
  std::vector<int32_t> greedy_ids;  // per chunk, when the step was picked on the device
  std::vector<float> greedy_logprobs;
  std::vector<int64_t> first_row;   // per chunk: its first row in `logits`
  std::vector<int64_t> num_rows;    // per chunk: 1, or its token count if all_logits
  int64_t vocab = 0;
  // Rows whose CC MLP part ran on the device (EngineOptions.prefill_gpu_tokens).
  int64_t prefill_gpu_rows = 0;
  const float* Row(size_t chunk, int64_t i = -1) const {
    const int64_t r = i < 0 ? first_row[chunk] + num_rows[chunk] - 1 : first_row[chunk] + i;
    return logits.data() + r * vocab;
  }
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Checkpoint> ckpt,
                                                        const EngineOptions& options);

  // Runs the model over the batch and returns logits. Validates every chunk
  // (ids in range, positions contiguous with the cache, no duplicate
  // sequence, context limit, placement) before touching any state; KV
  // exhaustion is ResourceExhausted (for cpu_attention sequences, as the
  // offload reports it). A failed step leaves every sequence's length as it
  // was, so the same chunks can be run again.
  //
  // `micro_batch_sizes`, when given, splits this step into micro-batches of
  // that many consecutive chunks each (summing to the batch; Neo's two
  // asymmetric sub-batches), in place of micro_batch_size(): InvalidArgument
  // if they do not add up, FailedPrecondition for more than one with the
  // expert cache.
  absl::StatusOr<StepResult> Step(const std::vector<SequenceChunk>& batch,
                                  absl::Span<const int64_t> micro_batch_sizes = {});

  // Routes the experts the offload claims to it (not owned; null = all
  // experts local). Set before the first Step.
  // With the expert cache on, the offload must compute any expert; null
  // goes back to the engine's own.
  void SetExpertOffload(ExpertOffload* offload) {
    offload_ = offload != nullptr ? offload : own_offload_.get();
  }
  // Computes the attention of cpu_attention sequences (not owned; null =
  // such chunks are FailedPrecondition). Set before the first Step.
  void SetAttentionOffload(AttentionOffload* offload) { attn_offload_ = offload; }

  // ScheInfer's n_g from now on (EngineOptions.prefill_gpu_tokens; the
  // coordinator re-solves it for each prefill). InvalidArgument if negative,
  // or positive without CC rows.
  absl::Status SetPrefillGpuTokens(int64_t n);

  // MoE-Lightning's mu from now on (EngineOptions.micro_batch_size; the
  // coordinator may change it between steps). InvalidArgument if negative,
  // FailedPrecondition if positive with the expert cache on.
  absl::Status SetMicroBatchSize(int64_t n);
  int64_t micro_batch_size() const { return micro_batch_size_; }

  // Forgets a sequence and returns its KV blocks (on the attention offload
  // for a cpu_attention sequence).
  void FreeSequence(int64_t seq_id);
  // True if the sequence's KV is on the attention offload.
  bool IsCpuAttention(int64_t seq_id) const { return cpu_seqs_.contains(seq_id); }
  // Tokens of the sequence held in the cache (0 if unknown).
  int64_t SequenceLength(int64_t seq_id) const;

  const ModelConfig& config() const { return ckpt_->config(); }
  const Device& device() const { return *dev_; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  const ModelWeights& weights() const { return weights_; }
  // What the load chose or did that the user should hear of (bf16 weights left
  // unpacked for want of memory, GGUF tensors converted or mapped from the
  // conversion cache); empty when nothing.
  const std::string& load_notice() const { return load_notice_; }
  int64_t max_context() const { return max_context_; }
  // Blocks of the engine's own KV cache not held by any sequence.
  int64_t free_kv_blocks() const { return kv_->free_blocks(); }
  ops::ComputeType compute_type() const { return weights_.lm_head.compute_type(); }
  // Null unless weight_budget_bytes left some layers' FFN weights streamed.
  const WeightPager* weight_pager() const { return pager_.get(); }
  // Null unless EngineOptions::expert_cache is on.
  const ExpertCache* expert_cache() const { return cache_.get(); }

 private:
  Engine() = default;
  absl::Status Validate(const std::vector<SequenceChunk>& batch) const;
  // Moves a sequence that holds no tokens yet to the chunk's placement.
  void Place(const SequenceChunk& s);
  // A step's micro-batch: chunks [chunk0, chunk1) of the batch, which own
  // rows [row0, row0 + rows) of every per-token scratch array.
  struct MicroBatch {
    size_t chunk0 = 0, chunk1 = 0;
    int64_t row0 = 0, rows = 0;
  };
  // The attention offload's jobs of one micro-batch, and on a device of its
  // own memory the host copies of their rows; two sets, so that one
  // micro-batch's jobs are built while the previous one's are in flight.
  struct OffloadedAttention {
    std::vector<AttentionJob> jobs;
    std::vector<float> host;  // q, k, v, out of every job, off such a device
  };
  // Layer `l` for every micro-batch: attention (its pieces below, in
  // engine_attention.cc), then the FFN, pipelined against the attention
  // offload.
  absl::Status RunLayer(int64_t l, const std::vector<SequenceChunk>& batch,
                        const std::vector<MicroBatch>& mbs);
  // The q/k/v projections, q/k norms and RoPE of a micro-batch (reads h_).
  absl::Status Project(int64_t l, const MicroBatch& mb);
  // Builds the offloaded jobs of the micro-batch's cpu_attention chunks.
  absl::Status StageJobs(const std::vector<SequenceChunk>& batch, const MicroBatch& mb,
                         OffloadedAttention& o);
  // Attention of the micro-batch's own chunks over the device's cache.
  absl::Status AttendLocal(int64_t l, const std::vector<SequenceChunk>& batch,
                           const MicroBatch& mb);
  // Waits for the offloaded jobs and puts their output in attn_'s rows.
  absl::Status CollectJobs(int64_t l, const std::vector<SequenceChunk>& batch,
                           const MicroBatch& mb, OffloadedAttention& o);
  // o_proj, the residual, the FFN norm, the FFN from `ffn` and its residual
  // of a micro-batch (x_ rows updated in place).
  absl::Status FinishLayer(int64_t l, const LayerWeights& lw, const LayerWeights& ffn,
                           const MicroBatch& mb);
  // The FFN functions' input and output rows: the current micro-batch's.
  float* FfnIn() { return h_.data() + row0_ * config().hidden_size; }
  float* FfnOut() { return out_.data() + row0_ * config().hidden_size; }
  // The MoE step (engine_moe.cc): reads h_, writes out_.
  // One MoE layer's routing for a step, and where each activated expert
  // runs; one is kept (moe_route_) so that its vectors are not allocated
  // anew for every layer of every step.
  struct MoeRoute {
    std::vector<std::vector<int64_t>> tokens;  // [expert] its tokens, in token order
    std::vector<std::vector<float>> weights;   // [expert] their routing weights
    std::vector<char> on_cpu;                  // [expert] computed by the expert offload
    std::vector<int> local_order;              // the device's experts, in run order
    LayerPlan plan;                            // the expert cache's plan, when it is on
    std::vector<ExpertJob> jobs;               // the offload's experts
    std::vector<int64_t> remote_rows;          // the tokens of the jobs' rows, in order
    std::vector<ExpertRun> runs;               // RunLocalExperts' runs
    std::vector<ops::MlpWeights> cached;       // the expert cache's weights of the runs
  };
  absl::Status Moe(int64_t layer, const LayerWeights& l, int64_t rows);
  // Routes the tokens and places each activated expert.
  absl::Status RouteMoe(int64_t layer, const LayerWeights& lw, int64_t rows, MoeRoute& route);
  absl::Status SubmitRemoteExperts(int64_t layer, MoeRoute& route);
  absl::Status RunLocalExperts(int64_t layer, const LayerWeights& lw, int64_t rows,
                               MoeRoute& route);
  absl::Status CollectRemoteExperts(int64_t layer, const MoeRoute& route);
  // Picks the layers whose FFN weights are streamed under
  // options.weight_budget_bytes and sets up the pager.
  absl::Status SetUpStreaming(const EngineOptions& options);
  // Creates the expert cache (options.expert_cache on) and the offload
  // that computes the CPU's share until SetExpertOffload names another.
  absl::Status SetUpExpertCache(const EngineOptions& options);
  absl::Status StartStreaming(const std::vector<int64_t>& layers, int64_t largest_bytes,
                              int64_t page_bytes);
  // The FFN of layer `l`, computed from `lw` (reads FfnIn(), writes FfnOut()).
  absl::Status Ffn(int64_t l, const LayerWeights& lw, int64_t rows);
  // A dense MLP split between the device and the CPU (lw.mlp_cpu); the CC
  // part of the first step_gpu_rows_ rows on the device (CG').
  absl::Status SplitMlp(const LayerWeights& lw, int64_t rows);
  // lw.mlp_cpu as the device reads it: on a device of its own memory, a
  // copy in cg_prime_ made now.
  absl::StatusOr<ops::MlpWeights> StageCcWeights(const LayerWeights& lw);
  // Sums a row-parallel layer's partial output FfnOut()[rows, hidden] over the
  // tensor-parallel ranks (a no-op on one rank).
  absl::Status ReduceOut(int64_t rows);
  // RMSNorm over the whole q (or k) projection of every row when it is split
  // over ranks: x[rows, dim] is this rank's part, w its part of the weight.
  absl::Status ShardedFullNorm(float* x, int64_t rows, int64_t dim, int64_t full_dim,
                               const float* w);

  // A device scratch array of floats, grown (contents dropped) as steps need.
  struct Scratch {
    DeviceMemory mem;
    float* data() const { return mem == nullptr ? nullptr : static_cast<float*>(mem->data()); }
  };
  absl::Status Grow(Scratch& s, int64_t n);

  // The mapping and the weights outlive the device: a CUDA device unpins
  // the streamed weights' host pages when it goes, and they must still be
  // mapped then, the buffers the weights own (f16 widened to f32, a
  // column slice of a split down projection) included.
  std::unique_ptr<Checkpoint> ckpt_;
  ModelWeights weights_;
  std::unique_ptr<Device> own_device_;  // before what it allocates: released after it
  Device* dev_ = nullptr;
  std::string load_notice_;
  std::unique_ptr<KvCache> kv_;
  std::vector<float> inv_freq_;
  int64_t max_context_ = 0;
  absl::flat_hash_map<int64_t, int64_t> seq_len_;
  absl::flat_hash_set<int64_t> cpu_seqs_;  // sequences whose KV is on attn_offload_
  ExpertOffload* offload_ = nullptr;
  AttentionOffload* attn_offload_ = nullptr;
  AllReduce* tp_ = nullptr;  // null or a group of one: no tensor parallelism
  bool experts_skipped_ = false;  // some routed experts' weights were not loaded
  // Streaming of host-resident FFN weights (null: all resident). The copy
  // engine outlives the pager, which outlives nothing it copies into.
  std::unique_ptr<CopyEngine> copy_engine_;
  DeviceMemory staging_[2];  // on the device
  std::unique_ptr<WeightPager> pager_;
  std::unique_ptr<ExpertCache> cache_;  // after the copy engine and device: goes first
  // The CPU's share of a cached model when no offload is set (computes
  // from weights_, so it is declared after them: it goes first).
  std::unique_ptr<ExpertOffload> own_offload_;
  int64_t heads_ = 0;        // query heads of this rank
  int64_t kv_heads_ = 0;     // KV heads of this rank

  // Scratch reused across steps, on the device. T = tokens in the step.
  Scratch x_;       // [T, hidden] residual stream
  Scratch h_;       // [T, hidden] normalised input of a sublayer
  Scratch q_;       // [T, q_dim]
  Scratch k_;       // [T, kv_dim]
  Scratch v_;       // [T, kv_dim]
  Scratch attn_;    // [T, q_dim]
  Scratch out_;     // [T, hidden] sublayer output
  Scratch ex_out_;  // [rows, hidden] the shared expert's output
  Scratch sumsq_;   // [T] ShardedFullNorm's row statistics
  Scratch router_logits_;  // [T, experts]
  Scratch logits_;  // [rows, vocab] when the device's memory is not the host's
  Scratch remote_dev_;  // [T * top_k, hidden] remote experts' rows on such a device
  // Host memory.
  std::vector<int32_t> route_ids_;    // [T, top_k]
  std::vector<float> route_w_;        // [T, top_k]
  std::vector<int64_t> positions_;    // [T]
  std::vector<float> remote_in_;      // [T * top_k, hidden] rows sent to remote experts
  std::vector<float> remote_out_;     // [T * top_k, hidden] their results
  OffloadedAttention offloaded_[2];      // by micro-batch parity
  std::vector<AttentionChunk> chunks_;   // a micro-batch's local sequences
  int64_t micro_batch_size_ = 0;         // mu (EngineOptions); 0: one micro-batch
  int64_t row0_ = 0;                     // the micro-batch the FFN functions work on
  std::vector<float> cc_in_;      // [T, hidden] h_ on the host, for the CPU's MLP rows
  std::vector<float> cc_out_;     // [T, hidden] their partial output
  ops::MlpScratch cc_scratch_;
  MoeRoute moe_route_;
  Scratch cc_dev_;                // [T, hidden] that output on a device of its own memory
  int64_t prefill_gpu_tokens_ = 0;  // n_g (EngineOptions)
  int64_t step_gpu_rows_ = 0;       // this step's n_g: rows whose CC part runs on the device
  DeviceMemory cg_prime_;           // the CC weights copied for those rows (own-memory device)
  Scratch cg_out_;                  // [n_g, hidden] their CC part's output
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_ENGINE_H_
