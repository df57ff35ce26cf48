// Writes a few small valid GGUF files into the directory given as argv[1]: the fuzzer's seeds.
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"

using namespace peregrine;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_gguf_seeds DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;

  Metadata meta;
  meta.set("general.architecture", MetaValue::string("llama"));
  meta.set("a.u8", {MetaType::U8, uint64_t{7}});
  meta.set("a.i8", {MetaType::I8, int64_t{-7}});
  meta.set("a.u16", {MetaType::U16, uint64_t{700}});
  meta.set("a.i16", {MetaType::I16, int64_t{-700}});
  meta.set("a.u32", MetaValue::u32(70000));
  meta.set("a.i32", MetaValue::i32(-70000));
  meta.set("a.f32", MetaValue::f32(0.5f));
  meta.set("a.bool", MetaValue::boolean(true));
  meta.set("a.u64", MetaValue::u64(1ull << 40));
  meta.set("a.i64", {MetaType::I64, int64_t{-(1ll << 40)}});
  meta.set("a.f64", {MetaType::F64, 0.25});
  const std::string toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81the"};
  meta.set("tokenizer.ggml.tokens", MetaValue::string_array(toks));
  const int32_t ints[] = {1, 2, 3};
  meta.set("a.nested", MetaValue::array(MetaType::ARRAY, {MetaValue::i32_array(ints), MetaValue::i32_array(ints)}));

  int index = 0;
  for (size_t alignment : {size_t{32}, size_t{8}}) {
    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                            TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K}) {
      GgufWriter w(meta, alignment);
      const int64_t row = tensor_type_info(type).block_elems == 256 ? 256 : 32;
      std::vector<float> x(static_cast<size_t>(row * 2));
      for (auto& v : x) v = dist(rng);
      std::vector<std::byte> q(tensor_bytes(type, row * 2));
      quantize_row(type, x.data(), q.data(), row * 2);
      w.add_tensor_bytes("blk.0.attn_q.weight", type, {row, 2}, q);
      std::vector<float> norm(8, 1.f);
      w.add_tensor_bytes("blk.0.attn_norm.weight", TensorType::F32, {8}, std::as_bytes(std::span(norm)));
      w.write(dir / ("seed" + std::to_string(index++) + ".gguf"));
    }
  }
  GgufWriter empty(Metadata{});
  empty.write(dir / "empty.gguf");
  return 0;
}
