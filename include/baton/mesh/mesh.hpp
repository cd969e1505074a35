#pragma once

// Meshes: many actors (or procs) addressed at once through a named Shape.
//
//   auto trainers = procs.spawn<Trainer>("trainers", 42);      // one actor per proc
//   auto later = procs.spawn_async<Trainer>("more", 7);        // a future: co_await it in actors
//   ValueMesh<double> loss = trainers.call(&Trainer::train, 0).get();
//   trainers.slice("gpus", 0, 4).broadcast(&Trainer::train, 1);
//
// A slice is a view: it shares the actors and narrows the shape. Replies carry their Point.
// Every adverb travels down the cast tree (baton/mesh/cast.hpp).

#include "baton/mesh/actor_mesh.hpp"
#include "baton/mesh/proc_mesh.hpp"
#include "baton/mesh/value_mesh.hpp"
