// sqlx's `migrate!` embeds `migrations/` at compile time, but stable Rust cannot tell
// cargo that a proc macro read a directory: without this, adding a migration file
// leaves a stale binary that applies the old set (sqlx's documented fix).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
