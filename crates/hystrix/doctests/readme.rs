//! The setup of the Rust snippets of README.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: readme-quick-start
struct UserClient;

impl UserClient {
    fn get_user_name(&self, id: u64) -> Result<String, MyError> {
        Ok(format!("user {id}"))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = UserClient;
    // [snippet]
    assert_eq!(name, "user 42");
    Ok(())
}
