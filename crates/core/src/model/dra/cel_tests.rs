//! Tests of [`super`]: selectors as Kubernetes' scheduler_perf, NVIDIA's driver and the
//! apiserver's own library tests write them.

use super::*;
use crate::model::dra::slice::Capacity;

const PERF_DRIVER: &str = "test-driver.cdi.k8s.io";
const NVIDIA: &str = "gpu.nvidia.com";

/// A device with these attributes and capacities (quantities as written).
fn device(attributes: &[(&str, AttributeValue)], capacity: &[(&str, &str)], multi: bool) -> Device {
    Device {
        name: "dev-0".to_string(),
        attributes: attributes
            .iter()
            .map(|(n, v)| ((*n).to_string(), v.clone()))
            .collect(),
        capacity: capacity
            .iter()
            .map(|(n, q)| {
                let value = parse_quantity(q).expect("a quantity");
                (
                    (*n).to_string(),
                    Capacity {
                        value,
                        policy: None,
                    },
                )
            })
            .collect(),
        consumes_counters: Vec::new(),
        nodes: None,
        taints: Vec::new(),
        binding_conditions: Vec::new(),
        binding_failure_conditions: Vec::new(),
        binds_to_node: false,
        allow_multiple_allocations: multi,
    }
}

fn string(s: &str) -> AttributeValue {
    AttributeValue::String(s.to_string())
}

fn version(s: &str) -> AttributeValue {
    AttributeValue::Version(s.to_string())
}

/// A device of scheduler_perf's `resourceslice-basic-devices.yaml`, names qualified.
fn perf_device(multi: bool) -> CelDevice {
    let q = |n: &str| format!("{PERF_DRIVER}/{n}");
    let dev = device(
        &[
            (&q("driver"), string("xe")),
            (&q("driverVersion"), version("1.2.3")),
            (&q("model"), string("B60")),
            (&q("sriov"), AttributeValue::Bool(true)),
            ("resource.kubernetes.io/pciRoot", string("pci0000:01")),
        ],
        &[(&q("memory"), "24480Mi"), (&q("millicores"), "1k")],
        multi,
    );
    CelDevice::new(PERF_DRIVER, &dev)
}

/// An A100 as NVIDIA's DRA driver publishes it.
fn a100() -> CelDevice {
    let q = |n: &str| format!("{NVIDIA}/{n}");
    let dev = device(
        &[
            (&q("productName"), string("NVIDIA A100-SXM4-40GB")),
            (&q("brand"), string("Nvidia")),
            (&q("architecture"), string("Ampere")),
            (&q("driverVersion"), version("550.54.15")),
            (&q("cudaComputeCapability"), version("8.0.0")),
            (&q("cudaDriverVersion"), version("12.4.0")),
            (&q("index"), AttributeValue::Int(3)),
            (&q("type"), string("gpu")),
            ("resource.kubernetes.io/pcieRoot", string("pci0000:00")),
        ],
        &[(&q("memory"), "40Gi")],
        false,
    );
    CelDevice::new(NVIDIA, &dev)
}

/// Compiles `expression` and evaluates it on `device`.
fn eval(expression: &str, device: &CelDevice) -> Result<bool, String> {
    Selector::compile(expression)?.matches(device)
}

/// Evaluates `expression` on a device without attributes, expecting a bool.
fn check(expression: &str) -> bool {
    let dev = CelDevice::new(PERF_DRIVER, &device(&[], &[], false));
    match eval(expression, &dev) {
        Ok(b) => b,
        Err(e) => panic!("{expression}: {e}"),
    }
}

/// Evaluates `expression` on a device without attributes, expecting an error.
fn error(expression: &str) -> String {
    let dev = CelDevice::new(PERF_DRIVER, &device(&[], &[], false));
    match eval(expression, &dev) {
        Ok(b) => panic!("{expression}: {b}, expected an error"),
        Err(e) => e,
    }
}

#[test]
fn the_selectors_of_scheduler_perf_select_its_devices() {
    let plain = perf_device(false);
    let shared = perf_device(true);
    let by_driver = r#"device.driver == "test-driver.cdi.k8s.io""#;
    assert_eq!(eval(by_driver, &plain), Ok(true));
    let by_version_and_memory = r#"device.attributes["test-driver.cdi.k8s.io"].driverVersion.major() >= 1 && device.capacity["test-driver.cdi.k8s.io"].memory.isGreaterThan(quantity("1Mi"))"#;
    assert_eq!(eval(by_version_and_memory, &plain), Ok(true));
    let consumable =
        "device.driver == \"test-driver.cdi.k8s.io\" &&\ndevice.allowMultipleAllocations == true";
    assert_eq!(eval(consumable, &plain), Ok(false));
    assert_eq!(eval(consumable, &shared), Ok(true));
    assert_eq!(
        eval(r#"device.driver == "no-such-driver.cdi.k8s.io""#, &plain),
        Ok(false)
    );
}

#[test]
fn nvidia_shaped_attributes_are_selected_on() {
    let gpu = a100();
    for (expression, want) in [
        (
            r#"device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-40GB""#,
            true,
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
            true,
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0"#,
            false,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.isLessThan(semver("9.0.0"))"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100") && device.attributes["gpu.nvidia.com"].index < 4"#,
            true,
        ),
        (
            r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00""#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].architecture in ["Ampere", "Hopper"]"#,
            true,
        ),
        (
            r#"cel.bind(gpu, device.attributes["gpu.nvidia.com"], gpu.brand == "Nvidia" && gpu.type == "gpu")"#,
            true,
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory == quantity("40960Mi")"#,
            true,
        ),
        (
            r#"has(device.driver) && has(device.attributes["gpu.nvidia.com"].productName) && !has(device.attributes["gpu.nvidia.com"].mig)"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].?migProfile.orValue("none") == "none""#,
            true,
        ),
        (
            r#"device.attributes.all(d, d in ["gpu.nvidia.com", "resource.kubernetes.io"])"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].exists(id, id == "productName")"#,
            true,
        ),
    ] {
        assert_eq!(eval(expression, &gpu), Ok(want), "{expression}");
    }
}

#[test]
fn an_unknown_domain_is_an_empty_map_and_an_unknown_id_an_error() {
    let gpu = a100();
    assert_eq!(
        eval(r#"device.attributes["dra.example.com"].size() == 0"#, &gpu),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.capacity["dra.example.com"].size() == 0"#, &gpu),
        Ok(true)
    );
    assert_eq!(
        eval(r#"!("dra.example.com" in device.attributes)"#, &gpu),
        Ok(true)
    );
    assert_eq!(
        eval(r#"device.attributes["gpu.nvidia.com"].healthy"#, &gpu),
        Err("no such key: healthy".to_string())
    );
    assert_eq!(
        eval(r#"device.attributes["dra.example.com"].model == "x""#, &gpu),
        Err("no such key: model".to_string())
    );
}

#[test]
fn a_result_that_is_not_a_bool_is_an_error() {
    let gpu = a100();
    assert_eq!(
        eval(r#"device.attributes["gpu.nvidia.com"].index"#, &gpu),
        Err("CEL result of type int could not be converted to bool".to_string())
    );
    assert_eq!(
        eval(r#"device.capacity["gpu.nvidia.com"].memory"#, &gpu),
        Err("CEL result of type kubernetes.Quantity could not be converted to bool".to_string())
    );
    // Plainly not a bool: refused when compiling, as Kubernetes' type checker does.
    for (expression, ty) in [
        ("device.driver", "string"),
        ("1 + 2", "int"),
        (r#"quantity("1")"#, "kubernetes.Quantity"),
        (
            r#"device.attributes["gpu.nvidia.com"].driverVersion.major()"#,
            "int",
        ),
        (r#"true ? "a" : "b""#, "string"),
    ] {
        assert_eq!(
            Selector::compile(expression).map(|_| ()),
            Err(format!(
                "must evaluate to bool or the unknown type, not {ty}"
            )),
            "{expression}"
        );
    }
}

#[test]
fn allow_multiple_allocations_is_false_unless_set() {
    let expression = "device.allowMultipleAllocations";
    assert_eq!(eval(expression, &perf_device(false)), Ok(false));
    assert_eq!(eval(expression, &perf_device(true)), Ok(true));
}

#[test]
fn a_name_without_a_domain_is_the_drivers() {
    let dev = CelDevice::new(
        "dra.example.com",
        &device(&[("model", string("x"))], &[("memory", "1Gi")], false),
    );
    assert_eq!(
        eval(
            r#"device.attributes["dra.example.com"].model == "x" && device.capacity["dra.example.com"].memory.isInteger()"#,
            &dev
        ),
        Ok(true)
    );
}

#[test]
fn an_expression_too_long_is_refused() {
    let long = format!("device.driver == \"{}\"", "a".repeat(MAX_EXPRESSION_LENGTH));
    assert_eq!(
        Selector::compile(&long).map(|_| ()),
        Err("Too long: may not be more than 10240 bytes".to_string())
    );
    let just = format!("\"{}\" != \"\"", "a".repeat(MAX_EXPRESSION_LENGTH - 8));
    assert_eq!(just.len(), MAX_EXPRESSION_LENGTH);
    assert!(check(&just));
}

#[test]
fn a_syntax_error_says_where_it_is() {
    let e = Selector::compile("device.driver == ")
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.starts_with("compilation failed: ERROR: <input>:1:"),
        "{e}"
    );
    let e = Selector::compile("device.driver == \"a\" &&\n  (")
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.starts_with("compilation failed: ERROR: <input>:2:"),
        "{e}"
    );
}

#[test]
fn undeclared_names_and_fields_are_refused_when_compiling() {
    assert_eq!(
        Selector::compile("dev.driver == \"x\"").map(|_| ()),
        Err("compilation failed: ERROR: <input>:1:1: undeclared reference to 'dev' (in container '')\n| dev.driver == \"x\"\n| ^".to_string())
    );
    let e = Selector::compile("device.drivers == \"x\"")
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("undefined field 'drivers'"), "{e}");
    let e = Selector::compile("cel.bind(1, 2, true)")
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.contains("cel.bind() variable names must be simple identifiers"),
        "{e}"
    );
    // Comprehension variables, bindings and type names are declared; they shadow `device`.
    assert!(check("[1, 2].all(x, x > 0) && type(1) == int"));
    assert!(check("cel.bind(device, {'driver': 1}, device.driver == 1)"));
    assert!(check(
        "optional.of(1).hasValue() && lists.range(3).size() == 3"
    ));
}

#[test]
fn nested_comprehensions_over_the_cost_limit_are_refused() {
    let refused = "Forbidden: too complex, exceeds cost limit".to_string();
    let gpu = a100();
    // 32^3 evaluations of the innermost body: within the limit.
    let three = "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, a == b || b != c)))";
    assert_eq!(eval(three, &gpu), Ok(false));
    // 32^4: over it.
    let four = "device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, device.attributes.all(d, a == d))))";
    assert_eq!(Selector::compile(four).map(|_| ()), Err(refused.clone()));
    // Literal ranges count by their length.
    let hundreds =
        "lists.range(200).all(a, lists.range(200).all(b, lists.range(200).all(c, a + b + c >= 0)))";
    assert_eq!(
        Selector::compile(hundreds).map(|_| ()),
        Err(refused.clone())
    );
    assert!(check(
        "lists.range(200).all(a, lists.range(200).all(b, a + b >= 0))"
    ));
    // A range computed when evaluating cannot be bounded.
    assert_eq!(
        Selector::compile(r#"lists.range(device.attributes["x"].n).size() > 0"#).map(|_| ()),
        Err(refused.clone())
    );
    // A string doubled at each binding grows past any bound.
    let doubling = |n: usize| {
        let mut e = format!("size(s{n}) == {}", 2u64 << n);
        for i in (1..=n).rev() {
            e = format!("cel.bind(s{i}, s{} + s{}, {e})", i - 1, i - 1);
        }
        format!("cel.bind(s0, 'ab', {e})")
    };
    assert_eq!(Selector::compile(&doubling(40)).map(|_| ()), Err(refused));
    assert!(check(&doubling(4)));
}

#[test]
fn a_version_attribute_that_is_not_one_fails_every_selector() {
    let dev = CelDevice::new(
        NVIDIA,
        &device(
            &[("gpu.nvidia.com/driverVersion", version("550.54"))],
            &[],
            false,
        ),
    );
    assert_eq!(
        eval("true", &dev),
        Err("attribute gpu.nvidia.com/driverVersion: parse semantic version: No Major.Minor.Patch elements found".to_string())
    );
}

/// From k8s.io/apiserver/pkg/cel/library/quantity_test.go.
#[test]
fn the_quantity_library_is_kubernetes() {
    for expression in [
        r#"quantity("200M") == quantity("200M")"#,
        r#"quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")"#,
        r#"quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M")"#,
        r#"quantity("200M") != quantity("0.3G")"#,
        r#"quantity("50M").isLessThan(quantity("50Mi"))"#,
        r#"!quantity("100M").isLessThan(quantity("50M"))"#,
        r#"quantity("50Mi").isGreaterThan(quantity("50M"))"#,
        r#"quantity("200M").compareTo(quantity("0.2G")) == 0"#,
        r#"quantity("50M").compareTo(quantity("50Mi")) == -1"#,
        r#"quantity("50Mi").compareTo(quantity("50M")) == 1"#,
        r#"quantity("50k").add(quantity("20")) == quantity("50.02k")"#,
        r#"!quantity("50k").add(20).isLessThan(quantity("50020"))"#,
        r#"quantity("50k").sub(quantity("20")) == quantity("49.98k")"#,
        r#"quantity("50k").sub(20) == quantity("49980")"#,
        r#"quantity("50k").add(20).sub(quantity("100k")).asInteger() == -49980"#,
        r#"quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger() == 20"#,
        r#"quantity("50k").asInteger() == 50000"#,
        r#"quantity("50").isInteger() && !quantity("1.5").isInteger()"#,
        r#"quantity("50.703k").asApproximateFloat() == 50703.0"#,
        r#"sign(quantity("-1m")) == -1 && sign(quantity("0")) == 0 && sign(quantity("3Ki")) == 1"#,
        r#"isQuantity("20") && isQuantity("20M") && isQuantity("20Mi")"#,
        r#"!isQuantity("20Mo") && !isQuantity("10Mm")"#,
        r#"type(quantity("1")) != int"#,
    ] {
        assert!(check(expression), "{expression}");
    }
    assert_eq!(
        error(r#"quantity("10Mo").isInteger()"#),
        QUANTITY_FORMAT_ERROR
    );
    assert_eq!(
        error(r#"quantity("10Mm").isInteger()"#),
        "unable to parse quantity's suffix"
    );
    assert_eq!(
        error(r#"quantity("1.5").asInteger() == 1"#),
        "cannot convert value to integer"
    );
    // Quantities have no `<`, as in Kubernetes (where it is a compilation error).
    let e = error(r#"quantity("1") < quantity("2")"#);
    assert!(e.contains("_<_"), "{e}");
}

/// From k8s.io/apiserver/pkg/cel/library/semver_test.go, and semver 2.0's precedence.
#[test]
fn the_semver_library_is_kubernetes() {
    for expression in [
        r#"semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3"#,
        r#"semver("1.0.0") == semver("1.0.0") && semver("1.0.0+build.1") == semver("1.0.0+build.2")"#,
        r#"semver("1.0.0") != semver("1.0.1")"#,
        r#"semver("1.10.0").isGreaterThan(semver("1.9.0"))"#,
        r#"semver("1.0.0").compareTo(semver("1.0.0")) == 0"#,
        r#"semver("1.0.0").compareTo(semver("1.0.1")) == -1"#,
        r#"semver("2.0.0").compareTo(semver("1.0.1")) == 1"#,
        r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0"))"#,
        r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))"#,
        r#"semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))"#,
        r#"semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))"#,
        r#"semver("1.0.0-beta.11").isLessThan(semver("1.0.0-rc.1"))"#,
        r#"semver("v1.0", true) == semver("1.0.0") && semver("01.01.01", true) == semver("1.1.1")"#,
        r#"isSemver("1.0.0") && !isSemver("v1.0.0") && !isSemver("1.0") && !isSemver("01.0.0")"#,
        r#"isSemver("v1.0", true) && !isSemver("1.0-alpha", true)"#,
        r#"isSemver("1.2.3-beta.1+build.1") && !isSemver("") && !isSemver(" 1.0.0") && !isSemver("1.0.0 ")"#,
        r#"isSemver("1", true) && isSemver("01.01.01", true) && semver("v01.01", true) == semver("1.1.0")"#,
        r#"!isSemver("", true) && !isSemver(" 1.0.0", true) && !isSemver("1. 0.0", true) && !isSemver("1.0.0 ", true)"#,
        r#"type(semver("1.0.0")) != type(quantity("1"))"#,
    ] {
        assert!(check(expression), "{expression}");
    }
    assert_eq!(
        error(r#"semver("1.0").major() == 1"#),
        "No Major.Minor.Patch elements found"
    );
    assert_eq!(
        error(r#"semver("01.0.0").major() == 1"#),
        "Major number must not contain leading zeroes \"01\""
    );
    assert_eq!(
        error(r#"semver("1.0.0-01").major() == 1"#),
        "Numeric PreRelease version must not contain leading zeroes \"01\""
    );
    assert_eq!(
        error(r#"semver("1.0-alpha", true).major() == 1"#),
        "short version cannot contain PreRelease/Build meta data"
    );
    // Each type dispatches its own `compareTo`; they do not mix.
    let e = error(r#"semver("1.0.0").compareTo(quantity("1")) == 0"#);
    assert!(e.contains("compareTo"), "{e}");
}

#[test]
fn calls_of_literals_are_computed_once_and_evaluate_alike() {
    let folded = Selector::compile(
        r#"quantity("1Mi").isInteger() && isSemver("1.0.0") && semver("1.0.0", true).major() == 1"#,
    )
    .expect("compiles");
    assert_eq!(folded.constants.0.len(), 2);
    let dev = perf_device(false);
    assert_eq!(folded.matches(&dev), Ok(true));
    // A literal that fails is left to fail when evaluated.
    let failing = Selector::compile(r#"quantity("1Mo").isInteger()"#).expect("compiles");
    assert!(failing.constants.0.is_empty());
    assert_eq!(
        failing.matches(&dev),
        Err(QUANTITY_FORMAT_ERROR.to_string())
    );
}

#[test]
fn runtime_errors_are_worded_as_cel_go_words_them() {
    assert_eq!(error("1 / 0 == 1"), "division by zero");
    assert_eq!(error("1 % 0 == 1"), "modulus by zero");
    assert_eq!(error("{'a': 1}.b == 1"), "no such key: b");
}

#[test]
fn an_expression_nested_too_deep_is_refused_without_overflowing_a_stack() {
    // The parser's own limit, on nested expressions.
    let parens = format!("{}1{} == 1", "(".repeat(200), ")".repeat(200));
    let e = Selector::compile(&parens).map(|_| ()).unwrap_err();
    assert!(
        e.starts_with("compilation failed: ERROR: <input>:1:"),
        "{e}"
    );
    // Ours, on chains the parser builds as deep as they are long.
    for deep in [
        format!("{} == 2500", vec!["1"; 2500].join(" + ")),
        format!("device{} == 1", ".a".repeat(3000)),
    ] {
        assert!(deep.len() <= MAX_EXPRESSION_LENGTH);
        let e = Selector::compile(&deep).map(|_| ()).unwrap_err();
        assert!(
            e.contains("expression recursion limit exceeded: 250"),
            "{e}"
        );
    }
    // `||` and `&&` chains are balanced: 400 terms nest 9 deep.
    let ors = vec!["device.driver == 'x'"; 400].join(" || ");
    assert_eq!(eval(&ors, &perf_device(false)), Ok(false));
    assert!(check(&format!("{} == 30", vec!["1"; 30].join(" + "))));
}

#[test]
fn selectors_and_devices_are_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Selector>();
    shared::<CelDevice>();
}
