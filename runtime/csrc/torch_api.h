// What the kernels use of torch: at::Tensor and the few ops they call, AT_DISPATCH, and pybind11
// with torch's tensor casters. Not <torch/extension.h>: its C++ frontend (torch/all.h) was ~16 of
// the ~29 s each source took to parse, in every build and in tests/test_native_portable.py.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>   // pybind11, its STL casters and at::Tensor's
