#include "kube_api.hpp"
