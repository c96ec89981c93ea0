use plangate::domain::gating::{ParsedTaskList, TaskListSource, validate};
#[derive(serde::Deserialize)]
struct Body { tasks: ParsedTaskList, existing_files: Vec<String> }
fn main() {
    let text = std::fs::read_to_string("/tmp/b50.json").unwrap();
    let n = 20000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let b: Body = serde_json::from_str(&text).unwrap();
        let r = validate(TaskListSource::Parsed(b.tasks), &b.existing_files);
        std::hint::black_box(serde_json::to_vec(&r.report()).unwrap());
    }
    println!("parse+validate+serialize: {:?}/iter", t.elapsed() / n);
}
