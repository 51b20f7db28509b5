// Train the bundled model on the embedded samples, one image a step, and print over Serial
// what the bundle's `make run-host` prints, byte for byte: the mean loss and the accuracy on
// the held-out samples after each epoch. The example is the bundle's main.c, compiled by
// src/tt_example.c as the function tt_example(); it prints through tt_example_write().
#include <tt_model.h>

extern "C" int tt_example(void);

extern "C" void tt_example_write(const char *text) {
  Serial.print(text);
}

void setup() {
  Serial.begin(115200);
  while (!Serial) {
  }
  tt_example();
}

void loop() {
}
