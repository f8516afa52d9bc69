"""Phrasings of each thing, and the held-out split: paraphrases and colour combinations.

**Training phrasings** of a thing are its name and its aliases
(:class:`~models.things.vocab.Thing`), minus any that contains a held-out paraphrase as
whole words. Captions frame them with the templates of :mod:`models.things.captions`
("a picture of a rocket").

**Held-out paraphrases** (:data:`HELDOUT_PARAPHRASES`) were written by hand, before any
model was trained on this data: synonyms and everyday words a new user might type for a
thing ("kitty" for the cat face, "puppy" for the dog, "spaceship" for the rocket,
"aubergine" for the eggplant). None of them is, as whole words, part of any thing's name
(so no name is lost), and no training caption ever contains one (training phrasings that
would are dropped). They measure whether the text encoder carries a new word to the
thing it means. Size words ("big", "tiny"), colour words and counts are kept out of them,
since the layout reads those.

**Held-out colour combinations.** A colour variant ``(thing, colour)`` is held out when
``crc32("<key>/<colour>") % 8 == 0``: about one in eight, decided per pair, so every
colour is still trained with most things and every colourable thing with most colours;
the ``"train"`` split never draws a held-out pair.
"""

from __future__ import annotations

import re
import zlib
from functools import cache, lru_cache

from models.things.render import THING_COLOURS
from models.things.vocab import Thing, thing_keys, things_by_key

SPLITS: tuple[str, ...] = ("train", "heldout")
COLOUR_HOLDOUT_MODULUS = 8

#: Thing key -> paraphrases never used in training (written before training).
HELDOUT_PARAPHRASES: dict[str, tuple[str, ...]] = {
    # food and drink
    "banana": ("plantain",),
    "grapes": ("bunch of grapes", "vine fruit"),
    "watermelon": ("slice of watermelon",),
    "hamburger": ("cheeseburger", "burger"),
    "hot_dog": ("frankfurter", "wiener"),
    "pizza": ("pepperoni pizza", "slice of pizza"),
    "taco": ("tortilla",),
    "ice_cream": ("gelato",),
    "doughnut": ("donut",),
    "cookie": ("biscuit",),
    "birthday_cake": ("party cake",),
    "cupcake": ("muffin",),
    "beer_mug": ("pint of beer", "ale"),
    "wine_glass": ("glass of wine",),
    "hot_beverage": ("mug of coffee", "cup of joe"),
    "teapot": ("tea kettle",),
    "ear_of_corn": ("corn cob", "maize"),
    "eggplant": ("aubergine",),
    "bell_pepper": ("capsicum",),
    "hot_pepper": ("chili pepper", "chilli"),
    "potato": ("spud",),
    "peanuts": ("groundnuts",),
    "bread": ("loaf of bread",),
    "croissant": ("crescent roll",),
    "cheese_wedge": ("cheddar",),
    "bacon": ("rasher",),
    "poultry_leg": ("drumstick", "chicken leg"),
    "cooked_rice": ("bowl of rice",),
    "spaghetti": ("pasta", "noodles"),
    "sushi": ("maki roll",),
    "candy": ("sweets", "bonbon"),
    "chocolate_bar": ("candy bar",),
    "honey_pot": ("jar of honey",),
    "pineapple": ("ananas",),
    "peach": ("nectarine",),
    "melon": ("cantaloupe",),
    "tangerine": ("mandarin", "clementine"),
    "green_apple": ("granny smith",),
    "blueberries": ("bilberries",),
    "onion": ("shallot",),
    "chestnut": ("conker",),
    "steaming_bowl": ("noodle soup",),
    "dumpling": ("gyoza",),
    "shortcake": ("slice of cake",),
    "custard": ("pudding", "flan"),
    "cocktail_glass": ("martini",),
    "tropical_drink": ("pina colada",),
    "bottle_with_popping_cork": ("bubbly",),
    "tumbler_glass": ("whiskey glass",),
    "cup_with_straw": ("soda cup", "soft drink"),
    "bubble_tea": ("boba",),
    "fork_and_knife": ("cutlery",),
    "spoon": ("teaspoon",),
    "pancakes": ("flapjacks",),
    "salt": ("salt shaker",),
    "canned_food": ("tin can",),
    "bento_box": ("lunch box",),
    # animals
    "cat_face": ("kitty", "kitty cat"),
    "cat": ("house cat", "feline"),
    "dog": ("puppy", "pooch", "doggy"),
    "dog_face": ("puppy face",),
    "monkey": ("primate",),
    "gorilla": ("great ape",),
    "wolf": ("timber wolf",),
    "fox": ("vixen",),
    "raccoon": ("trash panda",),
    "lion": ("king of the jungle",),
    "tiger": ("bengal tiger",),
    "horse": ("stallion", "pony"),
    "unicorn": ("mythical horse",),
    "zebra": ("striped horse",),
    "deer": ("stag", "reindeer"),
    "cow": ("cattle", "heifer"),
    "ox": ("bull",),
    "pig": ("hog", "swine"),
    "boar": ("wild pig",),
    "ewe": ("lamb",),
    "goat": ("billy goat",),
    "camel": ("dromedary",),
    "llama": ("alpaca",),
    "elephant": ("pachyderm",),
    "mouse": ("house mouse",),
    "rat": ("sewer rat",),
    "hamster": ("guinea pig",),
    "rabbit": ("hare",),
    "chipmunk": ("squirrel",),
    "bat": ("flying mammal",),
    "bear": ("grizzly",),
    "polar_bear": ("arctic bear",),
    "otter": ("sea otter",),
    "kangaroo": ("wallaby",),
    "turkey": ("gobbler",),
    "chicken": ("hen",),
    "rooster": ("cockerel",),
    "bird": ("songbird",),
    "penguin": ("emperor penguin",),
    "dove": ("pigeon",),
    "eagle": ("bird of prey", "hawk"),
    "duck": ("mallard", "duckling"),
    "swan": ("cygnet",),
    "owl": ("barn owl",),
    "peacock": ("peafowl",),
    "parrot": ("macaw", "parakeet"),
    "frog": ("toad",),
    "crocodile": ("alligator", "gator"),
    "turtle": ("tortoise",),
    "lizard": ("gecko", "iguana"),
    "snake": ("serpent", "cobra"),
    "dragon": ("wyvern",),
    "sauropod": ("brontosaurus",),
    "t_rex": ("tyrannosaurus",),
    "whale": ("humpback whale",),
    "dolphin": ("porpoise",),
    "tropical_fish": ("angelfish",),
    "blowfish": ("pufferfish",),
    "shark": ("hammerhead",),
    "octopus": ("cephalopod",),
    "spiral_shell": ("seashell", "conch"),
    "snail": ("escargot",),
    "butterfly": ("moth",),
    "bug": ("caterpillar",),
    "honeybee": ("bumblebee",),
    "lady_beetle": ("ladybird",),
    "spider": ("tarantula",),
    "mosquito": ("gnat",),
    "worm": ("earthworm",),
    "microbe": ("germ", "bacteria"),
    # plants and nature
    "bouquet": ("bunch of flowers",),
    "cherry_blossom": ("sakura",),
    "cactus": ("saguaro",),
    "evergreen_tree": ("fir tree", "pine tree"),
    "deciduous_tree": ("oak tree",),
    "four_leaf_clover": ("lucky clover",),
    "mushroom": ("toadstool",),
    "sun": ("sunshine",),
    "crescent_moon": ("lunar crescent",),
    "snowflake": ("snow crystal",),
    "snowman": ("frosty the snowman",),
    "fire": ("flames", "blaze"),
    "droplet": ("water drop", "raindrop"),
    "water_wave": ("ocean wave",),
    "tornado": ("twister",),
    "cyclone": ("hurricane",),
    "high_voltage": ("lightning bolt",),
    "ringed_planet": ("saturn",),
    "mountain": ("hill",),
    "desert_island": ("tropical island",),
    # vehicles
    "automobile": ("motorcar", "sedan"),
    "taxi": ("cab", "taxicab"),
    "bus": ("omnibus",),
    "fire_engine": ("fire truck",),
    "police_car": ("squad car", "cop car"),
    "racing_car": ("race car",),
    "bicycle": ("push bike", "cycle"),
    "motorcycle": ("motorbike",),
    "motor_scooter": ("moped", "vespa"),
    "locomotive": ("steam engine",),
    "airplane": ("aeroplane", "jet plane", "airliner"),
    "helicopter": ("chopper",),
    "rocket": ("spaceship", "space rocket"),
    "flying_saucer": ("ufo",),
    "sailboat": ("yacht", "sailing boat"),
    "canoe": ("kayak",),
    "speedboat": ("powerboat",),
    "passenger_ship": ("cruise ship", "ocean liner"),
    "tractor": ("farm vehicle",),
    # objects
    "mobile_phone": ("smartphone", "cellphone", "cell phone"),
    "laptop": ("notebook computer",),
    "desktop_computer": ("computer monitor",),
    "television": ("tv", "telly"),
    "video_camera": ("camcorder",),
    "telephone": ("rotary phone",),
    "alarm_clock": ("bedside clock",),
    "hourglass_done": ("sand timer", "egg timer"),
    "light_bulb": ("lightbulb",),
    "flashlight": ("torch",),
    "hammer": ("mallet",),
    "wrench": ("spanner",),
    "scissors": ("shears",),
    "umbrella": ("parasol", "brolly"),
    "glasses": ("spectacles",),
    "sunglasses": ("shades",),
    "necktie": ("tie",),
    "t_shirt": ("tee shirt",),
    "jeans": ("denim trousers",),
    "dress": ("gown",),
    "bikini": ("two-piece",),
    "running_shoe": ("sneaker", "trainer"),
    "high_heeled_shoe": ("stiletto",),
    "crown": ("tiara",),
    "top_hat": ("stovepipe hat",),
    "billed_cap": ("baseball cap",),
    "graduation_cap": ("mortarboard",),
    "backpack": ("rucksack", "knapsack"),
    "handbag": ("shoulder bag",),
    "briefcase": ("attache case",),
    "luggage": ("suitcase",),
    "ring": ("wedding ring",),
    "gem_stone": ("jewel",),
    "book": ("novel",),
    "books": ("stack of books",),
    "newspaper": ("daily paper",),
    "pencil": ("graphite pencil",),
    "pen": ("ballpoint", "biro"),
    "pushpin": ("thumbtack",),
    "straight_ruler": ("yardstick",),
    "wastebasket": ("trash can", "dustbin"),
    "package": ("parcel", "cardboard box"),
    "wrapped_gift": ("present", "birthday present"),
    "teddy_bear": ("stuffed animal", "plush toy"),
    "tennis": ("tennis ball",),
    "bowling": ("bowling ball",),
    "guitar": ("acoustic guitar",),
    "violin": ("fiddle",),
    "trumpet": ("bugle",),
    "drum": ("snare drum",),
    "microphone": ("mic",),
    "headphone": ("earphones", "headset"),
    "saxophone": ("sax",),
    "musical_keyboard": ("piano",),
    "clock": ("wall clock", "timepiece"),
    "watch": ("wristwatch",),
    "stopwatch": ("chronometer",),
    "magnet": ("horseshoe magnet",),
    "syringe": ("injection",),
    "pill": ("tablet", "capsule"),
    "test_tube": ("vial",),
    "telescope": ("spyglass",),
    "dagger": ("short sword",),
    "crossed_swords": ("duelling swords",),
    "bow_and_arrow": ("archery bow",),
    "axe": ("hatchet",),
    "chair": ("wooden chair",),
    "bed": ("mattress",),
    "couch_and_lamp": ("sofa",),
    "toilet": ("loo", "lavatory"),
    "bathtub": ("tub",),
    "ladder": ("stepladder",),
    "broom": ("broomstick",),
    "basket": ("wicker basket",),
    "soap": ("bar of soap",),
    "bucket": ("pail",),
    "locked": ("padlock",),
    "megaphone": ("bullhorn",),
    "battery": ("power cell",),
    "electric_plug": ("power plug",),
    "satellite_antenna": ("satellite dish",),
    "world_map": ("map of the world",),
    "statue_of_liberty": ("lady liberty",),
    "ferris_wheel": ("observation wheel",),
    "roller_coaster": ("rollercoaster",),
    "carousel_horse": ("merry-go-round",),
    "slot_machine": ("fruit machine",),
    "video_game": ("game controller", "gamepad"),
    "game_die": ("dice",),
    "puzzle_piece": ("jigsaw piece",),
    "chess_pawn": ("chess piece",),
    "trophy": ("award cup",),
    "sports_medal": ("medallion",),
    "christmas_tree": ("xmas tree",),
    "fireworks": ("firework display",),
    "money_bag": ("sack of money",),
    "dollar_banknote": ("dollar bill",),
    "coin": ("penny",),
    "bomb": ("explosive",),
    "balloon": ("party balloon",),
    # buildings and places
    "house": ("home", "cottage"),
    "castle": ("fortress", "palace"),
    "church": ("chapel",),
    "hospital": ("clinic",),
    "school": ("schoolhouse",),
    "tent": ("camping tent",),
    "office_building": ("skyscraper",),
    "stadium": ("arena",),
    # faces, people, hands
    "grinning_face": ("happy face", "smiley face"),
    "face_with_tears_of_joy": ("crying with laughter",),
    "smiling_face_with_heart_eyes": ("lovestruck face",),
    "loudly_crying_face": ("sobbing face", "bawling face"),
    "angry_face": ("mad face",),
    "thinking_face": ("pondering face",),
    "sleeping_face": ("snoozing face",),
    "nerd_face": ("geek face",),
    "skull": ("human skull", "cranium"),
    "ghost": ("spook", "phantom"),
    "alien": ("extraterrestrial", "martian"),
    "robot": ("android",),
    "pile_of_poo": ("poop", "turd"),
    "clown_face": ("circus clown",),
    "jack_o_lantern": ("carved pumpkin", "halloween pumpkin"),
    "baby": ("infant", "newborn"),
    "boy": ("lad",),
    "girl": ("lass",),
    "person": ("human",),
    "old_man": ("grandpa", "grandfather"),
    "old_woman": ("grandma", "granny"),
    "police_officer": ("policeman", "cop"),
    "firefighter": ("fireman",),
    "astronaut": ("spaceman", "cosmonaut"),
    "detective": ("sleuth",),
    "santa_claus": ("father christmas", "saint nick"),
    "ninja": ("shinobi",),
    "mermaid": ("siren",),
    "zombie": ("undead",),
    "vampire": ("dracula",),
    "cook": ("chef",),
    "farmer": ("rancher",),
    "pilot": ("aviator",),
    "student": ("pupil",),
    "singer": ("vocalist",),
    "artist": ("painter",),
    "scientist": ("chemist",),
    "judge": ("magistrate",),
    "thumbs_up": ("approval sign",),
    "waving_hand": ("hello wave",),
    "clapping_hands": ("applause",),
    "folded_hands": ("praying hands",),
    "victory_hand": ("peace sign",),
    "flexed_biceps": ("strong arm",),
    "heart": ("love heart", "valentine"),
    "broken_heart": ("heartbreak",),
}


def _contains(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words."""
    return re.search(rf"(?<![\w'-]){re.escape(phrase)}(?![\w'-])", text) is not None


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return split


@lru_cache(maxsize=1)
def all_heldout_phrases() -> tuple[str, ...]:
    """Every held-out paraphrase, in dictionary order."""
    return tuple(p for phrases in HELDOUT_PARAPHRASES.values() for p in phrases)


@cache
def training_phrasings(thing: Thing) -> tuple[str, ...]:
    """The name and aliases of ``thing`` that contain no held-out paraphrase.

    The name always survives (no held-out paraphrase is part of a name).
    """
    return tuple(
        p
        for p in (thing.name, *thing.aliases)
        if not any(_contains(p, h) for h in all_heldout_phrases())
    )


def heldout_phrasings(thing: Thing) -> tuple[str, ...]:
    """The held-out paraphrases of ``thing`` (empty for most things)."""
    return HELDOUT_PARAPHRASES.get(thing.key, ())


def colour_free(phrasings: tuple[str, ...]) -> tuple[str, ...]:
    """The phrasings that name no colour (a colour variant cannot be "a blue red apple")."""
    colour_words = {*THING_COLOURS, "black", "white", "brown", "grey", "gray", "light"}
    return tuple(p for p in phrasings if not colour_words & set(p.split()))


def colour_heldout(key: str, colour: str) -> bool:
    """Whether the colour variant ``(key, colour)`` is held out from training."""
    return zlib.crc32(f"{key}/{colour}".encode()) % COLOUR_HOLDOUT_MODULUS == 0


@lru_cache(maxsize=1)
def heldout_things() -> tuple[str, ...]:
    """Keys with held-out paraphrases, in vocabulary order (checked against the vocabulary)."""
    table = things_by_key()
    unknown = sorted(set(HELDOUT_PARAPHRASES) - set(table))
    if unknown:
        raise KeyError(f"held-out paraphrases name unknown things: {unknown}")
    return tuple(k for k in thing_keys() if k in HELDOUT_PARAPHRASES)
