#include "prepare.hpp"
