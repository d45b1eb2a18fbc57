#include "kubevirt_cr.hpp"

#include <yaml-cpp/yaml.h>

#include <vector>

#include "io/config_files.hpp"

namespace vfiod::cli {

namespace {

// A field of the wrong shape, at the node that has it.
struct ShapeError {
    YAML::Mark mark;
    std::string what;
};

std::string where(const std::string& file, const YAML::Mark& m) {
    if (m.is_null())
        return file;
    return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

const char* shape_name(YAML::NodeType::value t) {
    switch (t) {
    case YAML::NodeType::Map: return "an object";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a scalar";
    default: return "nothing";
    }
}

// parent.key when it is there and not null (the API server's own output leaves empty fields
// out, a hand-written CR may write them null); an undefined node otherwise. Another shape than
// `want` is a ShapeError naming `path`.
YAML::Node field(const YAML::Node& parent, const char* key, YAML::NodeType::value want,
                 const std::string& path) {
    if (!parent || !parent.IsMap())
        return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node n = parent[key];
    if (!n || n.IsNull())
        return YAML::Node(YAML::NodeType::Undefined);
    if (n.Type() != want)
        throw ShapeError{n.Mark(), path + ": expected " + shape_name(want) + ", found " +
                                       shape_name(n.Type())};
    return n;
}

// The strings of the list at parent.key, each through kubevirt_type_key when `key_them`.
void add_strings(const YAML::Node& parent, const char* key, const std::string& path,
                 std::set<std::string>& out, bool key_them) {
    YAML::Node list = field(parent, key, YAML::NodeType::Sequence, path);
    for (size_t i = 0; list && i < list.size(); ++i) {
        const YAML::Node& s = list[i];
        if (!s.IsScalar())
            throw ShapeError{s.Mark(), path + "[" + std::to_string(i) + "]: expected a string"};
        out.insert(key_them ? kubevirt_type_key(s.Scalar()) : s.Scalar());
    }
}

bool flag(const YAML::Node& parent, const char* key, const std::string& path, bool* value) {
    YAML::Node n = field(parent, key, YAML::NodeType::Scalar, path);
    if (!n)
        return false;
    if (!YAML::convert<bool>::decode(n, *value))
        throw ShapeError{n.Mark(), path + ": expected true or false"};
    return true;
}

bool is_kind(const YAML::Node& doc, const char* kind) {
    if (!doc.IsMap())
        return false;
    YAML::Node k = doc["kind"];
    return k && k.IsScalar() && k.Scalar() == kind;
}

// The KubeVirt objects of the documents: top-level ones and the items of a List.
std::vector<YAML::Node> kubevirt_objects(const std::vector<YAML::Node>& docs) {
    std::vector<YAML::Node> out;
    for (const YAML::Node& d : docs) {
        if (is_kind(d, "KubeVirt"))
            out.push_back(d);
        if (!is_kind(d, "List"))
            continue;
        YAML::Node items = field(d, "items", YAML::NodeType::Sequence, "items");
        for (size_t i = 0; items && i < items.size(); ++i)
            if (is_kind(items[i], "KubeVirt"))
                out.push_back(items[i]);
    }
    return out;
}

KubevirtMdevConfig read_fields(const YAML::Node& spec) {
    KubevirtMdevConfig c;
    const std::string conf_path = "spec.configuration";
    YAML::Node conf = field(spec, "configuration", YAML::NodeType::Map, conf_path);
    std::set<std::string> gates;
    add_strings(field(conf, "developerConfiguration", YAML::NodeType::Map,
                      conf_path + ".developerConfiguration"),
                "featureGates", conf_path + ".developerConfiguration.featureGates", gates, false);
    c.gate = gates.count(kDisableMdevGate) > 0;

    const std::string mdc_path = conf_path + ".mediatedDevicesConfiguration";
    YAML::Node mdc = field(conf, "mediatedDevicesConfiguration", YAML::NodeType::Map, mdc_path);
    for (const char* key : {"mediatedDeviceTypes", "mediatedDevicesTypes"})
        add_strings(mdc, key, mdc_path + "." + key, c.configured, true);
    YAML::Node nodes = field(mdc, "nodeMediatedDeviceTypes", YAML::NodeType::Sequence,
                             mdc_path + ".nodeMediatedDeviceTypes");
    for (size_t i = 0; nodes && i < nodes.size(); ++i) {
        const std::string p = mdc_path + ".nodeMediatedDeviceTypes[" + std::to_string(i) + "]";
        if (!nodes[i].IsMap())
            throw ShapeError{nodes[i].Mark(), p + ": expected an object"};
        c.node_types = true;
        for (const char* key : {"mediatedDeviceTypes", "mediatedDevicesTypes"})
            add_strings(nodes[i], key, p + "." + key, c.configured, true);
    }
    bool enabled = true;
    if (flag(mdc, "enabled", mdc_path + ".enabled", &enabled))
        c.enabled = enabled;

    const std::string md_path = conf_path + ".permittedHostDevices.mediatedDevices";
    YAML::Node md = field(field(conf, "permittedHostDevices", YAML::NodeType::Map,
                                conf_path + ".permittedHostDevices"),
                          "mediatedDevices", YAML::NodeType::Sequence, md_path);
    for (size_t i = 0; md && i < md.size(); ++i) {
        const std::string p = md_path + "[" + std::to_string(i) + "]";
        if (!md[i].IsMap())
            throw ShapeError{md[i].Mark(), p + ": expected an object"};
        YAML::Node sel = field(md[i], "mdevNameSelector", YAML::NodeType::Scalar,
                               p + ".mdevNameSelector");
        bool external = false;
        flag(md[i], "externalResourceProvider", p + ".externalResourceProvider", &external);
        if (sel && external)
            c.external.insert(kubevirt_type_key(sel.Scalar()));
    }
    return c;
}

}  // namespace

std::string kubevirt_type_key(const std::string& name) {
    std::string s = name;
    for (char& ch : s)
        if (ch == ' ')
            ch = '_';
    const char* ws = " \t\n\v\f\r";
    size_t b = s.find_first_not_of(ws), e = s.find_last_not_of(ws);
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::optional<KubevirtMdevConfig> parse_kubevirt_cr(const std::string& text,
                                                    const std::string& file, std::string* error) {
    try {
        std::vector<YAML::Node> objects = kubevirt_objects(YAML::LoadAll(text));
        if (objects.empty()) {
            *error = file + ": no KubeVirt object (kind: KubeVirt) in it; give the CR as "
                            "kubectl get kubevirt -n kubevirt -o yaml prints it";
            return std::nullopt;
        }
        if (objects.size() > 1) {
            *error = where(file, objects[1].Mark()) +
                     ": a second KubeVirt object; give the file one (kubectl get kubevirt NAME "
                     "-n NAMESPACE -o yaml)";
            return std::nullopt;
        }
        YAML::Node spec = field(objects[0], "spec", YAML::NodeType::Map, "spec");
        if (!spec) {
            *error = where(file, objects[0].Mark()) + ": the KubeVirt object has no spec";
            return std::nullopt;
        }
        return read_fields(spec);
    } catch (const ShapeError& e) {
        *error = where(file, e.mark) + ": " + e.what;
    } catch (const YAML::Exception& e) {
        *error = where(file, e.mark) + ": not valid YAML or JSON: " + e.msg;
    }
    return std::nullopt;
}

std::optional<KubevirtMdevConfig> read_kubevirt_cr(const std::string& file, std::string* error) {
    std::string text, why;
    switch (read_plain_file(file, kMaxKubevirtCrBytes, &text, &why)) {
    case ReadStatus::Ok: return parse_kubevirt_cr(text, file, error);
    case ReadStatus::Missing: *error = file + ": no such file"; break;
    case ReadStatus::Failed: *error = file + ": " + why; break;
    }
    return std::nullopt;
}

}  // namespace vfiod::cli
