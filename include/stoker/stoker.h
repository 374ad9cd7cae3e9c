// Umbrella header: everything a trainer or a converter needs — the format, the loader,
// staging onto the GPU and the diagnosis of a feed. Each header states its own contract.
#pragma once

#include "stoker/batch.h"
#include "stoker/cpu.h"
#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/io.h"
#include "stoker/loader.h"
#include "stoker/log.h"
#include "stoker/mixture.h"
#include "stoker/order.h"
#include "stoker/pack.h"
#include "stoker/remote.h"
#include "stoker/shard.h"
#include "stoker/stage.h"
#include "stoker/tokenizer.h"
#include "stoker/verify.h"
