// ipcring.hpp — the whole public API.
#pragma once

#include "ipcring/config.hpp"
#include "ipcring/cuda_probe.hpp"
#include "ipcring/error.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/inspect.hpp"
#include "ipcring/producer.hpp"
#include "ipcring/reader.hpp"
#include "ipcring/result.hpp"
#include "ipcring/tensor.hpp"
#include "ipcring/version.hpp"
