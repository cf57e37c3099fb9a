//! `router-node`: the Switchyard binary. Thin on purpose: parse the command line, build the
//! node from config, run it.

fn main() {
    println!("router-node: the HTTP node is not built yet; see the open issues");
}
