//! The movie catalogue the backends serve, and the JSON the backends and the gateway exchange.

use serde::{Deserialize, Serialize};

/// Movies have ids `1..=CATALOGUE_SIZE`.
pub const CATALOGUE_SIZE: u32 = 40;

const ADJECTIVES: [&str; 8] = [
    "Quiet", "Last", "Crimson", "Hollow", "Northern", "Silent", "Golden", "Broken",
];
const NOUNS: [&str; 5] = ["Harbour", "Orchard", "Signal", "Lantern", "Frontier"];

/// A movie's title and year, as the catalog backend answers `GET /titles/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Title {
    /// The movie id.
    pub id: u32,
    /// Its title.
    pub title: String,
    /// The year it came out.
    pub year: u16,
}

impl Title {
    /// The title of movie `id` (every id has one, made from its digits).
    pub fn of(id: u32) -> Title {
        let adjective = ADJECTIVES[(id % 8) as usize];
        let noun = NOUNS[(id / 8 % 5) as usize];
        Title {
            id,
            title: format!("The {adjective} {noun}"),
            year: 1960 + (id * 7 % 60) as u16,
        }
    }
}

/// Movie `id`'s rating, from 2.5 to 4.9 stars.
pub fn rating_of(id: u32) -> f32 {
    2.5 + (id * 37 % 25) as f32 / 10.0
}

/// A movie recommended with another, as the recommendations backend answers
/// `GET /recommendations/{id}` (a list of three).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// Its id.
    pub id: u32,
    /// Its title.
    pub title: String,
}

/// The three movies recommended with movie `id`: the next three ids, wrapping around.
pub fn recommendations_for(id: u32) -> Vec<Recommendation> {
    (1..=3)
        .map(|step| (id + step - 1) % CATALOGUE_SIZE + 1)
        .map(|other| Recommendation {
            id: other,
            title: Title::of(other).title,
        })
        .collect()
}

/// Where a movie can be streamed, as the availability backend answers
/// `GET /availability/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// Region codes.
    pub regions: Vec<String>,
}

const REGIONS: [&str; 5] = ["BR", "DE", "IN", "JP", "US"];

/// The regions where movie `id` can be streamed: three or four of five.
pub fn availability_of(id: u32) -> Availability {
    let regions = REGIONS
        .iter()
        .enumerate()
        .filter(|(index, _)| (id as usize + index) % 3 != 0)
        .map(|(_, region)| (*region).to_owned())
        .collect();
    Availability { regions }
}

/// What a movie costs to rent, as the prices backends answer `GET /prices/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// The rental price in cents (US dollars).
    pub rent_cents: u32,
}

/// Movie `id`'s rental price: from 199 to 599 cents, in steps of 100.
pub fn price_of(id: u32) -> Price {
    Price {
        rent_cents: 199 + id % 5 * 100,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_ratings_and_recommendations_are_fixed_by_the_id() {
        assert_eq!(
            Title::of(9),
            Title {
                id: 9,
                title: "The Last Orchard".into(),
                year: 1963
            }
        );
        assert_eq!(rating_of(1), 3.7);
        assert_eq!(rating_of(25), 2.5);
        let ids: Vec<u32> = recommendations_for(39).iter().map(|r| r.id).collect();
        assert_eq!(ids, [40, 1, 2]);
        assert_eq!(recommendations_for(1)[0].title, "The Crimson Harbour");
        assert_eq!(availability_of(1).regions, ["BR", "DE", "JP", "US"]);
        assert_eq!(availability_of(2).regions, ["BR", "IN", "JP"]);
        assert_eq!(price_of(7), Price { rent_cents: 399 });
        assert_eq!(price_of(10), Price { rent_cents: 199 });
    }
}
