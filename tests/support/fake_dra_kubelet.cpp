#include "fake_dra_kubelet.hpp"
