// monolith: what every translation unit of step kernels shares (kernel/megakernel.cu,
// megakernel_sm120.cu, megakernel_tc.cu, megakernel_tck.cu; each X-ray twin #defines MONOLITH_XRAY and
// includes its plain source): the build's namespace, the step kernels compiled inside it
// (decode_step.cuh), and the one mapping from a variant id to its kernels, read from
// kernel/variant_units.def. A unit compiles exactly the kernels of its own rows (short, and long and
// wide where VariantCfg has them: info_of), so the table decides every unit's machine code and the
// host's dispatch at once.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "config.cuh"
#include "dequant.cuh"
#include "loads.cuh"
#include "megakernel.cuh"
#include "policy.cuh"
#include "ring.cuh"
#include "sync.cuh"
#include "xray.cuh"
#include "xvec.cuh"

// The build's namespace: the plain and X-ray builds' kernels and host functions carry different
// symbols, so one extension links both (megakernel.cuh declares each build's API).
#if defined(MONOLITH_XRAY)
#define MONOLITH_BUILD_NS xray_build
#else
#define MONOLITH_BUILD_NS plain_build
#endif

namespace monolith {

// The translation units of kernel/variant_units.def's "unit" column.
enum StepUnit : int { kUnitMain, kUnitSm120, kUnitTc, kUnitTcK, kUnitCount };

struct VariantRow {
  int variant;
  int unit;       // StepUnit
  bool launched;  // false: compiled, never handed to the host
};
inline constexpr VariantRow kVariantRows[] = {
#define MONOLITH_VARIANT(variant, unit, launched) {variant, kUnit##unit, launched},
#include "variant_units.def"
#undef MONOLITH_VARIANT
};
inline constexpr int kVariantCount = int(sizeof(kVariantRows) / sizeof(kVariantRows[0]));

constexpr bool variant_rows_in_id_order() {
  for (int i = 0; i < kVariantCount; ++i)
    if (kVariantRows[i].variant != i) return false;
  return true;
}
// kVariantRows[v] is variant v's row: the templates below index it by id.
static_assert(variant_rows_in_id_order(), "kernel/variant_units.def: one row per variant id, in id order");

namespace MONOLITH_BUILD_NS {

#include "decode_step.cuh"

inline constexpr KernelInfo kNoKernels{nullptr, nullptr, nullptr, 0, 0, false, false};

// A unit's kernels of one variant: where the table puts the variant in kUnit, its kernels are
// instantiated (kernels_of) and, if it is launched, described to the host (info_of); elsewhere none
// (a discarded branch instantiates nothing, so no unit compiles another's). A row never launched gets
// no host descriptor: its ring may exist for no device (policy.cuh refuses an sm_120 ring of k > 2).
template <int kUnit, int kVariant>
KernelInfo unit_kernels_of(bool device_sm120) {
  constexpr VariantRow row = kVariantRows[kVariant];
  if constexpr (row.unit != kUnit) {
    return kNoKernels;
  } else if constexpr (row.launched) {
    return info_of<kVariant>(device_sm120);
  } else {
    [[maybe_unused]] const StepKernels compiled = kernels_of<kVariant>();
    return kNoKernels;
  }
}

// Every kernel kUnit compiles, by variant id; kNoKernels for an id that is not the unit's.
template <int kUnit>
KernelInfo unit_kernels(int variant, bool device_sm120) {
  switch (variant) {
#define MONOLITH_VARIANT(variant, unit, launched) \
  case variant:                                   \
    return unit_kernels_of<kUnit, variant>(device_sm120);
#include "variant_units.def"
#undef MONOLITH_VARIANT
    default:
      return kNoKernels;
  }
}

// Each unit other than Main hands kernel_for (megakernel.cu) its unit_kernels here when it is linked
// into the extension (MONOLITH_STEP_UNIT: a static initializer); megakernel.cu defines every entry null,
// constant-initialized, so a unit that is not linked in leaves its variants without kernels.
using UnitKernelsFn = KernelInfo (*)(int variant, bool device_sm120);
extern UnitKernelsFn linked_units[kUnitCount];

template <int kUnit>
bool register_unit() {
  static_assert(kUnit != kUnitMain, "megakernel.cu compiles Main's kernels and dispatches them itself");
  linked_units[kUnit] = &unit_kernels<kUnit>;
  return true;
}

}  // namespace MONOLITH_BUILD_NS
}  // namespace monolith

// The whole body of a unit other than Main (megakernel_sm120.cu, megakernel_tc.cu, megakernel_tck.cu):
// registering unit_kernels<kUnit> instantiates exactly that unit's rows' kernels, and hands them to
// kernel_for where the unit is linked in.
#define MONOLITH_STEP_UNIT(unit)                                                     \
  namespace monolith::MONOLITH_BUILD_NS {                                            \
  [[maybe_unused]] static const bool unit_registered = register_unit<kUnit##unit>(); \
  }
