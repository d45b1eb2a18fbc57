#include "kubelet.hpp"
