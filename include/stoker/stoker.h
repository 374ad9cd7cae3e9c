// Umbrella header: everything a trainer or a converter needs.
#pragma once

#include "stoker/batch.h"
#include "stoker/cpu.h"
#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/io.h"
#include "stoker/loader.h"
#include "stoker/mixture.h"
#include "stoker/order.h"
#include "stoker/pack.h"
#include "stoker/shard.h"
#include "stoker/verify.h"
