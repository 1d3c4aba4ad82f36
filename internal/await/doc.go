// Package await is how tests wait: for a condition they can observe (a
// count reached, a server answering, a state stored), polled until it holds
// or a bound passes, never a fixed sleep standing in for synchronisation.
package await
