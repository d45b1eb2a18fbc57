#include "slices.hpp"
