// Decision trees walked from their roots to their leaves: one invocation per row of X and
// tree. Each node is four i32 (feature, true child, false child, rule); the rule's bits say
// which outcomes of comparing the row's feature x with the node's threshold t send the row to
// the true child: 1 x < t, 2 x == t, 4 x > t, 8 x is NaN; 16 marks a leaf, where the walk
// stops. A walk takes at most `depth` steps. A node or feature index outside the tables stops
// the walk there (the tables of a model are checked on the host when they are known).

alias T = f32; // ELEMENT TYPE

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    rows: u32,
    trees: u32,
    features: u32,
    nodes: u32,
    depth: u32,
    // Invocations per row of the grid and rows per plane (grids folded into y and z beyond
    // 65 535 workgroups).
    row: u32,
    plane: u32,
    // Where this dispatch's first row lies in `x` (elements) and its leaves in `leaves`: rows
    // beyond one binding run in windows of whole rows.
    x_first: u32,
    leaves_first: u32,
    // The trees this dispatch walks, `[tree_first, tree_first + trees)` of `tree_stride` (a
    // row's leaves), and their nodes `[node_lo, node_lo + nodes)`, node `node_lo` at element
    // `nodes_at` / `thresholds_at` of the windows bound: tables beyond one binding run in
    // groups of trees whose nodes fit one.
    tree_first: u32,
    tree_stride: u32,
    node_lo: u32,
    nodes_at: u32,
    thresholds_at: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> nodes: array<i32>;
@group(0) @binding(3) var<storage, read> thresholds: array<T>;
@group(0) @binding(4) var<storage, read> roots: array<i32>;
@group(0) @binding(5) var<storage, read_write> leaves: array<i32>;

// Whether the row goes to the node's true child by `rule`, its value `v` against threshold
// `t` (NaN tested on the bits: a driver may fold `v != v` away).
fn goes_true(rule: u32, v: T, t: T) -> bool {
    let nan = (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; // NAN TEST
    return ((rule & 1u) != 0u && v < t) || ((rule & 2u) != 0u && v == t) || ((rule & 4u) != 0u && v > t) || ((rule & 8u) != 0u && nan); // COMPARE
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = (gid.z * params.plane + gid.y) * params.row + gid.x;
    if i >= params.rows * params.trees {
        return;
    }
    let n = i / params.trees;
    let tree = params.tree_first + i % params.trees;
    var node = roots[tree];
    for (var level = 0u; level < params.depth; level++) {
        if node < 0 || u32(node) < params.node_lo || u32(node) - params.node_lo >= params.nodes {
            break;
        }
        let k = u32(node) - params.node_lo;
        let base = params.nodes_at + k * 4u;
        let rule = u32(nodes[base + 3u]);
        let feature = nodes[base];
        if (rule & 16u) != 0u || feature < 0 || u32(feature) >= params.features {
            break;
        }
        let v = x[params.x_first + n * params.features + u32(feature)];
        let t = thresholds[params.thresholds_at + k];
        node = select(nodes[base + 2u], nodes[base + 1u], goes_true(rule, v, t));
    }
    leaves[params.leaves_first + n * params.tree_stride + tree] = node;
}
