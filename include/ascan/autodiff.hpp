// autodiff.hpp — reverse-mode autodiff: tape, Var, differentiable ops and the differentiable scan.
#pragma once

#include "ascan/ad/gradcheck.hpp"
#include "ascan/ad/ops.hpp"
#include "ascan/ad/optim.hpp"
#include "ascan/ad/scan.hpp"
#include "ascan/ad/tape.hpp"
#include "ascan/ad/var.hpp"
#include "ascan/dual.hpp"
