#include "plugin.hpp"
