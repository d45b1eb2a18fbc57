#include "devices.hpp"
